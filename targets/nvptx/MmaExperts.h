// The MegaMoE expert stage of prefill on NVIDIA tensor cores: the (token,
// selected expert) items are first grouped by expert, then each expert's
// items run through its gate/up and down weights as 128-row tiles of the
// shared mma body (MmaTile.h), so an expert's weights are read once per 128
// of its tokens rather than once per token.
//
//   lists:   idx[T, k] -> meta (E + 2 words: each expert's first position in
//            `items`, the total, then the tile count), tiles (expert, first
//            row) pairs and items (item t*k + j, grouped by expert)
//   gate/up: h[t, j, :] = silu(gate_e z[t]) * (up_e z[t]), SwiGLU in the
//            epilogue (a warp's fragments hold gate and up of the same columns)
//   down:    y[t, j, :] = down_e h[t, j]
// NVFP4 weights are decoded to bf16 as they are staged (E2M1 times its E4M3
// scale is exact in bf16); the global scale multiplies the results.
// Within an expert the items' order comes from shared-memory atomics; each
// result depends on its own row only, so the outputs do not depend on it.
#pragma once

#include "targets/common/ExpertLists.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

using MmaExpertsShape = kernels::ExpertTileShape;

bool mmaExpertsFit(const MmaExpertsShape &shape);
kernels::KernelSpec mmaExpertLists(const MmaExpertsShape &shape);
kernels::KernelSpec mmaExpertGateUp(const MmaExpertsShape &shape);
kernels::KernelSpec mmaExpertDown(const MmaExpertsShape &shape);
kernels::Work mmaExpertListsWork(const MmaExpertsShape &shape);
kernels::Work mmaExpertGateUpWork(const MmaExpertsShape &shape);
kernels::Work mmaExpertDownWork(const MmaExpertsShape &shape);

} // namespace kiln::nvptx
