// Prefill attention on tensor cores, flash style: no score matrix in memory.
// A block takes 64 queries of one or two query heads of the same KV head,
// four warps a head; each warp holds
// 16 of them (their bf16 query fragments, an f32 output accumulator of
// 16 x head_dim and the running max and sum of each row). The block walks the
// keys its queries may see (causal, and within the sliding window) 64 at a
// time: the threads bring the tile's keys and values, bf16, into shared
// memory (keys before `past` from the KV cache, the rest from this call's
// K/V), each warp computes its 16 x 64 scores with mma.sync m16n8k16 (bf16
// in, f32 accumulate), masks them, updates its online softmax in registers,
// and multiplies the probabilities (as bf16 A fragments, straight from the
// score accumulators) by the value tile into its output. The block's heads
// share its tiles; the KV head's other query heads read them again through
// the L2 (GQA).
//
// Arguments: q [T, Hq, D], k and v [T, Hkv, D] (this call's), the K and V
// caches [slots, Hkv, D] (a ring of `window` slots on sliding layers), y [T,
// Hq, D], all f32; T, past; part, parts. The new K/V go into the cache after
// (the split attention's append kernel).
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>

namespace kiln::nvptx {

struct MmaAttentionShape : kernels::AttentionShape {
  static constexpr int64_t kQueries = 64, kKeys = 64, kHeadThreads = 128;
  // Query heads of one KV head a block takes (four warps each), sharing each
  // key and value tile it brings: two where the group divides by two (a
  // thread's 255 registers allow 256 threads a block), else one.
  int64_t headsPerBlock() const { return kvHeads > 0 && (qHeads / kvHeads) % 2 == 0 ? 2 : 1; }
  int64_t threads() const { return kHeadThreads * headsPerBlock(); }
  // Shared memory: the key tile and the value tile, each [64, D + 8] bf16
  // (the padding spreads a warp's fragment reads and ldmatrix rows over the
  // banks).
  int64_t keyStride() const { return headDim + 8; }
  int64_t sharedBytes() const { return 2 * kKeys * keyStride() * 2; }
};

bool mmaAttentionFits(const MmaAttentionShape &shape);
// `dropLastTile`: a kernel broken on purpose that skips each block's last key
// tile, for the check that must catch it.
kernels::KernelSpec mmaAttention(const MmaAttentionShape &shape, bool dropLastTile = false);
// One block per (64 queries, heads of the block) at up to `maxTokens` tokens.
kernels::Work mmaAttentionWork(const MmaAttentionShape &shape, int64_t maxTokens);

} // namespace kiln::nvptx
