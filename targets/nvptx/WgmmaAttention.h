// Prefill attention on Hopper's warpgroup MMA (sm_90a), flash style: no
// score matrix in memory. A block of three warpgroups takes 128 query rows
// of one KV head: 64 queries of two of its query heads where the group is
// even (each key and value tile then serves both), else 128 queries of one.
//
//   producer:  walks the keys the block's queries may see (causal, within
//              the sliding window), N a tile (tileKeys(): 64 or 128), through a
//              ring of shared-memory stages (WgmmaPipeline.h), keys and
//              values alike as N rows of D / 64 panels in the 128-byte
//              swizzle: the keys a K-major wgmma operand, the values an
//              MN-major one;
//   consumers: each holds its 64 queries as bf16 pairs in registers (loaded
//              once), computes its 64 x N scores with wgmma m64nNk16 (A
//              from registers, the key tile from shared memory, f32
//              accumulate),
//              masks them, updates its online softmax in registers, packs
//              the probabilities as bf16 pairs where they are (the A
//              operand's registers) and accumulates P V with wgmma m64nDk16
//              (A from registers, B transposed) into its f32 output. A
//              tile's P V and the next tile's scores are one commit group,
//              and the two consumers take turns issuing theirs (two named
//              barriers), so that one's softmax runs while the other's
//              products do.
//
// Blocks count down the query tiles (the last, longest causal walks first).
//
// This call's K/V are first staged as bf16 by a kernel of their own (keys
// and values [Hkv, R, D], R rows for the entry's most tokens and a tile of
// zeros past them), so that the producer brings a tile that lies wholly in
// this call by TMA copies of 64 dims by N rows (D / 64 panels each of keys
// and values), as the wgmma GEMMs bring theirs. A tile of a bf16 cache
// (chunked prefill) comes by TMA from the cache as well where its N slots
// are whole (not wrapped around a sliding ring, none below position 0);
// other cached tiles, and all of an f32 cache, are loaded, converted and
// stored by the producer's 128 threads, then the async proxy fenced.
//
// Arguments: q [T, Hq, D], k and v [T, Hkv, D] (this call's), the K and V
// caches [slots, Hkv, D] (a ring of `window` slots on sliding layers), y [T,
// Hq, D], all f32 but a bf16 cache (and y where asked for as bf16), the
// staged keys and values; T, past, the
// staged keys' and values' tensor maps (and a bf16 cache's two); part, parts. The new K/V go into
// the cache after (the split attention's append kernel).
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/common/TargetHooks.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::nvptx {

struct WgmmaAttentionShape : kernels::AttentionShape {
  static constexpr int64_t kPanel = 64;
  // Keys a tile: 128 at head dim 128 where a sliding window and a paged
  // cache's pages hold a whole tile (the scores then m64n128k16: each
  // tile's fixed costs, the output's rescale, the row reductions and the
  // consumers' turns, over twice the keys), else 64.
  int64_t tileKeys() const;
  // The ring's stages: 3 of 64 KB at 128 keys, 4 of up to 32 KB at 64.
  int64_t stages() const { return tileKeys() == 128 ? 3 : 4; }
  // Two heads of a KV head a block (64 queries each) where the group is
  // even, else one head's 128 queries.
  bool pairHeads() const { return group() % 2 == 0; }
  int64_t blockQueries() const { return pairHeads() ? 64 : 128; }
  int64_t headUnits() const { return pairHeads() ? qHeads / 2 : qHeads; }
  // 64-wide (128-byte) panels of the head dimension.
  int64_t panels() const { return headDim / kPanel; }
  int64_t sharedBytes() const;
};

// head_dim 64 or 128 (whole panels, wgmma n = head_dim), a whole group, a
// sliding window of at least a tile, and the staging kernel's rows in whole
// blocks (kvHeads * head_dim / 4 a multiple of 32).
bool wgmmaAttentionFits(const WgmmaAttentionShape &shape);

struct WgmmaAttentionKernels {
  kernels::KernelLaunch stage, attend;
  int64_t stagedRows = 0;
  std::vector<std::string> attendScalars;
};
// The staging and the attention kernels for entries of up to `maxTokens`.
// `dropLastTile`: an attention kernel broken on purpose that skips each
// block's last key tile, for the check that must catch it. `bf16Output`: y
// as bf16 (rounded to nearest even, as the cast kernel a bf16 GEMM would
// otherwise run on it rounds), for an output projection on tensor cores.
WgmmaAttentionKernels wgmmaAttention(const WgmmaAttentionShape &shape, int64_t maxTokens,
                                     bool dropLastTile = false, bool bf16Output = false);

} // namespace kiln::nvptx
