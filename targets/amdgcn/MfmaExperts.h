// The MegaMoE expert stage of prefill on CDNA matrix cores: the items listed
// by expert (targets/common/ExpertLists.h), then for each tile of 128 of an
// expert's items, four wavefronts of 32 items each through
// v_mfma_f32_32x32x8_bf16 (the operand layout of MfmaGemm.h):
//   gate/up: h[t, j, :] = silu(gate_e z[t]) * (up_e z[t]), gate and up of the
//            same 32 columns in two accumulators, SwiGLU in the epilogue;
//   down:    y[t, j, :] = down_e h[t, j].
// NVFP4 weights are decoded to bf16 as they are loaded (E2M1 times its E4M3
// scale is exact in bf16); the global scale multiplies the results. No AMD
// GPU here: compiled and checked by disassembly, never run.
#pragma once

#include "targets/common/ExpertLists.h"
#include "targets/common/KernelSpec.h"

namespace kiln::amdgcn {

bool mfmaExpertsFit(const kernels::ExpertTileShape &shape);
kernels::KernelSpec mfmaExpertGateUp(const kernels::ExpertTileShape &shape);
kernels::KernelSpec mfmaExpertDown(const kernels::ExpertTileShape &shape);
kernels::Work mfmaExpertGateUpWork(const kernels::ExpertTileShape &shape);
kernels::Work mfmaExpertDownWork(const kernels::ExpertTileShape &shape);

} // namespace kiln::amdgcn
