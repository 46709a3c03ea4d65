// Split-KV attention on mma.sync over a bf16 KV cache: the partials of the
// split path (TargetHooks::SplitAttention) with the query heads of one KV
// head as the MMA's 16 rows, so that each cached key and value is read once
// for all of them, as the cache holds it (bf16 is the MMA's input type).
//
// A warp takes (token, KV head, split of the visible keys) and walks its keys
// 16 at a time. Thread (g, t) = (lane / 4, lane % 4) loads keys g and g + 8
// of the tile at dims D/4 t .. D/4 (t + 1) - 1 (the score MMAs' k numbered
// so: the dot product does not care in which order dims are summed), and
// values of keys 2t, 2t + 1, 2t + 8, 2t + 9 at dims D/8 g .. D/8 (g + 1) - 1
// (the P V MMAs' n numbered so). The f32 side of each product, queries and
// probabilities, is split into its bf16 and the bf16 of what that left (two
// MMAs): the scores and outputs come within about 2^-16 of f32 arithmetic on
// the cached values, and the kernel stays bound by the cache's bytes.
// The partials (acc, max, sum per query head and split) go to the split
// path's merge kernel.
#pragma once

#include "targets/common/AttentionShape.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

// A bf16 or FP8 cache (its codes decoded to bf16 as they are loaded),
// head_dim a multiple of 16 up to 256, at most 16 query heads a KV head.
bool mmaDecodeAttentionFits(const kernels::AttentionShape &shape);
// The partials kernel: the split warp kernel's arguments (q, k, v, the caches,
// [positions,] partials [T, qHeads, splits, headDim + 4]; tokens, past).
kernels::KernelSpec mmaDecodeAttention(const kernels::AttentionShape &shape, int64_t splits,
                                       kernels::SequenceLayout sequences);
// A warp per (token, KV head, split).
kernels::Work mmaDecodeAttentionWork(const kernels::AttentionShape &shape, int64_t splits);

} // namespace kiln::nvptx
