// The MegaMoE expert stage of prefill on Hopper's wgmma pipeline (sm_90a),
// built as typed IR over WgmmaPipeline.h. The (token, choice) items are
// grouped by expert into tiles of up to 256 (ExpertLists.h): an expert's
// items mostly fit one tile, so each block reads (and, NVFP4, decodes) its
// slice of the expert's weights once for all of them. Then
//
//   rows:    the items' latent rows z[t] as bf16, in tile order: tile i's
//            rows are 256 i .. 256 i + 255 of x (rows past its items zero
//            up to the next 64, the rest never read; NVFP4: each 64-k
//            step's values in fragment order, WgmmaNvfp4Experts.h);
//   gate/up: h = silu(gate_e x) * (up_e x) a tile, gate and up of the same
//            64 columns in one block, written as bf16 in the same tile
//            order (NVFP4: in fragment order too);
//   down:    y[t, j, :] = down_e h, 128 columns a block, stored at each
//            item's place.
//
// A block of three warpgroups a (tile, column tile), its producer's first
// thread bringing the rows by TMA into a ring of stages. bf16 weights come
// by TMA too, as wgmma's B: consumer c takes the tile's 64-row blocks c and
// c + 2 and runs wgmma only on those that hold items, so a tile costs its
// items rounded up to 64. NVFP4 weights are the A operand instead, decoded
// into registers by the consumers, the rows B (WgmmaNvfp4Experts.h; Hopper
// has no FP4 tensor cores), and the NVFP4 global scale multiplies the
// accumulators. The pieces both share: WgmmaExpertTiles.h.
#pragma once

#include "targets/common/ExpertLists.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

// Whether the shape fits: intermediate a multiple of its column tile
// (min(64, intermediate)), latent of its own (min(128, latent)), both of
// 64 (the k step) and 32 (the decode's rows), and the lists fit.
bool wgmmaExpertsFit(const kernels::ExpertTileShape &shape);

// The stage's kernels, launches and buffers, as TargetHooks::MatrixExperts.
// `dropLastStep`: a deliberately broken gate/up kernel that skips its last
// k step, for the check that must fail.
kernels::TargetHooks::MatrixExperts wgmmaExperts(const kernels::ExpertTileShape &shape,
                                                 bool dropLastStep = false);

} // namespace kiln::nvptx
