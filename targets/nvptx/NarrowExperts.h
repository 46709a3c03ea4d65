// The MegaMoE expert stage of batched decode on tensor cores, with the items
// as the MMA's narrow side: mma.sync m16n8k16 takes 16 weight rows as A and 8
// of an expert's items as B, so an expert's weights stream from memory once
// for all its items (W4A16 for NVFP4, W16A16 for bf16 weights) while the
// CUDA cores only decode. 64 conversations choosing 8 of 256 experts give
// each expert about 2 items: a 128-item tile (WgmmaExperts, MmaExperts)
// would compute padding, and the warp GEMVs (GroupedExperts) spend their
// time on FMAs and activation loads rather than on the weights' bytes.
//
// A warp takes one tile of the expert lists (ExpertLists.h: an expert and
// up to 128 of its items) and 32 output rows: gate/up 16 rows of gate and
// the same 16 of up (SwiGLU in registers), down two tiles of 16. Its k loop
// walks chunks (NarrowMma.h): thread (g, t) = (lane / 4, lane % 4) loads
// its quarter of the chunk for its rows g and g + 8 (four NVFP4 blocks
// where k allows, or 32 bytes of bf16) and the same activations of item g;
// both fragments number k the same way, so the MMA's k16 steps cover the
// chunk. The loads of the next step are in flight while the tensor cores
// work. Activations are f32: each is split into a bf16 and
// the bf16 of its remainder, two MMAs, so the products match the f32
// GEMVs' (the weights' bytes, not the MMAs, bound the kernel).
//
// The kernels take the grouped kernels' arguments (z or h, the lists, the
// projections, h or y) and put results where they do (h[t, j, :], y[t, j,
// :]), so the expert scales and the weighted sum follow unchanged.
#pragma once

#include "targets/common/ExpertLists.h"

namespace kiln::nvptx {

// Blocks an SM that the NVFP4 kernels ask of ptxas on Hopper. Left alone,
// ptxas gives them ~103 registers, four blocks of 128 an SM; they stream
// their weights with plain loads and wait on them, so more warps in flight
// is what feeds them. Five (96 registers, no spills at sm_90a) ran 10%
// faster than four on an H100 (docs/gpu-notes.md, thirty-seventh session).
// Other chips keep ptxas's choice: at sm_100a and sm_120a five spill.
constexpr int32_t kHopperNvfp4BlocksPerSm = 5;

bool narrowExpertsFit(const kernels::ExpertTileShape &shape);
// The lists kernel and the two products with their launches and buffers.
// `nvfp4BlocksPerSm`: blocks an SM asked of ptxas for NVFP4 weights
// (nvvm.minctasm), 0 for ptxas's own choice. `dropLastStep`: a gate/up
// kernel broken on purpose that skips its last k step, for the check that
// must catch it.
kernels::TargetHooks::MatrixExperts narrowExperts(const kernels::ExpertTileShape &shape,
                                                  int32_t nvfp4BlocksPerSm = 0,
                                                  bool dropLastStep = false);

} // namespace kiln::nvptx
