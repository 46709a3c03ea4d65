// The GPU targets' shared kernel choices (GpuHooks.h). Where a shape does not
// fit a GPU kernel (a row width not a multiple of 4, a head too wide for a
// warp), the generic kernel serves, one thread a token.
#include "targets/common/GpuHooks.h"

#include "targets/common/Generators.h"
#include "targets/common/GroupedExperts.h"
#include "targets/common/HeadRowKernels.h"
#include "targets/common/WarpDot.h"

#include <algorithm>

namespace kiln::kernels {

namespace {

// Entry points of at most kGemvTokens tokens (batched decode) get GEMVs that
// share each weight load among their tokens: the block GEMV, or where k does
// not fit it a warp per row over kGemvGroup tokens at a time (4 f32 rows of a
// full-width activation, 128 KiB, stay in L1; 8 do not).
constexpr int64_t kGemvTokens = kBlockGemvTokens, kGemvGroup = 4;
// Below this many items an expert on average, an expert stage runs as
// grouped warp GEMVs rather than tiles of 128 items (GroupedExperts.h).
constexpr int64_t kGroupedItemsPerExpert = 16;

// A block of row-kernel threads per token.
Work rowBlock(int64_t width) {
  int64_t threads = rowBlockThreads(width);
  return Work{0, threads, threads};
}

// A warp per (token, head).
Work warpPerHead(int64_t heads) { return Work{0, warp::kWarp * heads}; }

// A block GEMV's launch: 8 warps per blockGemvRows() output rows.
Work blockGemvWork(int64_t n) {
  int64_t blocks = (n + blockGemvRows() - 1) / blockGemvRows();
  return Work{blocks * 8 * warp::kWarp, 0, 8 * warp::kWarp};
}

// How many splits of the visible keys an attention launch gets: decode needs
// them to spread one query over the machine (about 64 keys a split for a
// sliding window, 64 splits for global layers, whose length is only known at
// run time); prefill has warps enough from its tokens.
int64_t attentionSplits(int64_t window, int64_t maxTokens) {
  int64_t splits = window ? std::clamp<int64_t>((window + 63) / 64, 1, 64) : 64;
  return maxTokens > 1 ? std::min<int64_t>(splits, 4) : splits;
}

} // namespace

KernelLaunch GpuTargetHooks::embedKernel(int64_t vocab, int64_t hidden) const {
  if (!gpuRowsFit(hidden))
    return TargetHooks::embedKernel(vocab, hidden);
  return {embedThreads(vocab, hidden), Work{0, hidden / 4}};
}

KernelLaunch GpuTargetHooks::rmsNormKernel(int64_t width, double eps) const {
  if (!gpuRowsFit(width))
    return TargetHooks::rmsNormKernel(width, eps);
  return {rmsNormBlock(width, eps), rowBlock(width)};
}

KernelLaunch GpuTargetHooks::headNormKernel(int64_t heads, int64_t headDim, double eps) const {
  // The warp form holds a row as its two halves.
  if (headDim % 2 != 0)
    return TargetHooks::headNormKernel(heads, headDim, eps);
  return {headRowWarp("kiln.head_norm", heads, headDim, {headNormStage(headDim, eps)}),
          warpPerHead(heads)};
}

KernelLaunch GpuTargetHooks::ropeKernel(int64_t heads, int64_t headDim, double theta) const {
  return {headRowWarp("kiln.rope", heads, headDim, {ropeStage(headDim, theta)}),
          warpPerHead(heads)};
}

KernelLaunch GpuTargetHooks::headNormRopeKernel(int64_t heads, int64_t headDim, double eps,
                                                double theta) const {
  return {headRowWarp("kiln.head_norm_rope", heads, headDim,
                      {headNormStage(headDim, eps), ropeStage(headDim, theta)}),
          warpPerHead(heads)};
}

KernelLaunch GpuTargetHooks::normResidualKernel(int64_t width, double postEps,
                                                double nextEps) const {
  if (!gpuRowsFit(width))
    return TargetHooks::normResidualKernel(width, postEps, nextEps);
  return {normResidualBlock(width, postEps, nextEps), rowBlock(width)};
}

std::optional<KernelLaunch> GpuTargetHooks::rmsNormKernelWithBf16(int64_t width, double eps) const {
  if (!gpuRowsFit(width))
    return std::nullopt;
  return KernelLaunch{rmsNormBlock(width, eps, /*bf16Copy=*/true), rowBlock(width)};
}

std::optional<KernelLaunch>
GpuTargetHooks::normResidualKernelWithBf16(int64_t width, double postEps, double nextEps) const {
  if (!gpuRowsFit(width))
    return std::nullopt;
  return KernelLaunch{normResidualBlock(width, postEps, nextEps, /*bf16Copy=*/true),
                      rowBlock(width)};
}

KernelLaunch GpuTargetHooks::routerTopKKernel(int64_t experts, int64_t k) const {
  if (!routerWarpFits(experts))
    return TargetHooks::routerTopKKernel(experts, k);
  return {routerTopKWarp(experts, k), Work{0, warp::kWarp}};
}

TargetHooks::Gemv GpuTargetHooks::gemv(int64_t n, int64_t k, int64_t maxRows,
                                       bool splitRows) const {
  // One row (batch-1 decode): the split-k block kernel, eight warps a row
  // where the rows are many. A warp a row leaves the DRAM idle while a
  // warp's row drains and at the launch's tail; eight warps each read an
  // eighth, all their loads in flight at once (on an H100 the proxy's step
  // 3% faster than a warp a row, 1-2% faster than two or four warps;
  // docs/gpu-notes.md, twenty-sixth session).
  if (splitRows && maxRows == 1 && wideSplitGemvFits(n, k))
    return {linearSplitBlock(n, k, kWideSplits),
            Work{kWideSplits * warp::kWarp * n, 0, kWideSplits * warp::kWarp}};
  if (splitRows && splitGemvFits(n, k))
    return {linearSplitBlock(n, k), Work{4 * warp::kWarp * n, 0, 4 * warp::kWarp}};
  if (maxRows >= 2 && maxRows <= kGemvTokens) {
    if (blockGemvFits(k, maxRows))
      return {linearBlockTokens(n, k, maxRows), blockGemvWork(n), true};
    if (warpGemvFits(k))
      return {linearWarpTokens(n, k, std::min(maxRows, kGemvGroup)), Work{warp::kWarp * n, 0},
              true};
  }
  if (warpGemvFits(k))
    return {linearWarp(n, k), Work{warp::kWarp * n, 0}};
  return TargetHooks::gemv(n, k, maxRows, splitRows);
}

std::optional<TargetHooks::Gemv> GpuTargetHooks::gemvPair(int64_t n, int64_t k) const {
  // Where gemv's split rows take the split-k block kernel (few rows, long k).
  if (!splitGemvFits(n, k))
    return std::nullopt;
  return Gemv{linearSplitBlockPair(n, k, gemvPairBroken()),
              Work{4 * warp::kWarp * 2 * n, 0, 4 * warp::kWarp}};
}

KernelLaunch GpuTargetHooks::kvAppendKernel(const AttentionShape &shape,
                                            SequenceLayout sequences) const {
  return {kvAppendWarp(shape, sequences), warpPerHead(shape.kvHeads)};
}

std::optional<TargetHooks::SplitAttention>
GpuTargetHooks::splitAttention(const AttentionShape &shape, int64_t maxTokens,
                               SequenceLayout sequences) const {
  if (!warpAttentionFits(shape.headDim))
    return std::nullopt;
  SplitAttention split;
  split.splits = attentionSplits(shape.window, maxTokens);
  split.partials = {attentionSplitWarp(shape, split.splits, sequences),
                    Work{0, warp::kWarp * shape.qHeads /
                                attentionHeadsPerWarp(shape.qHeads, shape.kvHeads) * split.splits}};
  split.merge = {attentionMergeWarp(shape.qHeads, shape.headDim, split.splits),
                 warpPerHead(shape.qHeads)};
  split.append = kvAppendKernel(shape, sequences);
  return split;
}

std::optional<TargetHooks::ExpertStage>
GpuTargetHooks::expertStage(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            double eps, bool nvfp4, int64_t maxTokens, int64_t members) const {
  // Batched decode spreads a few items over each expert: the tile kernels'
  // 128-item tiles would be mostly empty, so the grouped warp kernels take
  // entries that average fewer than kGroupedItemsPerExpert items an expert
  // (over all ranks' experts: each rank lists only its own).
  ExpertTileShape listShape{experts, k, intermediate, latent, nvfp4, maxTokens};
  bool grouped = maxTokens > 1 && groupedExpertsFit(listShape) &&
                 maxTokens * k < kGroupedItemsPerExpert * experts * members;
  ExpertStage stage;
  stage.listed = grouped         ? std::optional(fewItemsExperts(listShape))
                 : maxTokens > 1 ? matrixExperts(experts, k, intermediate, latent, nvfp4, maxTokens)
                                 : std::nullopt;
  if (!stage.listed) {
    if (!warpMoEFits(intermediate, latent))
      return std::nullopt;
    // Decode: the products spread over warps, a few rows each; NVFP4 rows
    // one token's vector at a time (the batch-1 step) read it staged.
    if (nvfp4 && maxTokens == 1 && stagedExpertsFit(intermediate, latent)) {
      std::optional<E4m3PairToF16> toF16 = e4m3PairToF16();
      const E4m3PairToF16 *pairs = toF16 ? &*toF16 : nullptr;
      stage.gateUp = {
          expertGateUpStaged(experts, k, intermediate, latent, stagedExpertsBroken(), pairs),
          stagedGateUpWork(k, intermediate)};
      stage.down = {expertDownStaged(experts, k, intermediate, latent, pairs),
                    stagedDownWork(k, latent)};
    } else {
      stage.gateUp = {expertGateUpWarp(experts, k, intermediate, latent, nvfp4),
                      Work{0, warp::kWarp * k * intermediate / 2}};
      stage.down = {expertDownWarp(experts, k, intermediate, latent, nvfp4),
                    Work{0, warp::kWarp * k * latent / 4}};
    }
  }
  if (expertCombineBlockFits(k, latent)) {
    stage.combine = {expertCombineBlock(experts, k, latent, eps, expertCombineBroken()),
                     rowBlock(latent)};
    return stage;
  }
  int64_t threads = rowBlockThreads(latent);
  stage.scales = {expertScalesBlock(k, latent, eps), Work{0, k * threads, threads}};
  stage.combine = {expertCombineThreads(experts, k, latent), Work{0, latent / 4}};
  return stage;
}

TargetHooks::MatrixExperts GpuTargetHooks::fewItemsExperts(const ExpertTileShape &shape) const {
  return groupedExperts(shape);
}

std::optional<KernelSpec> GpuTargetHooks::greedyKernel() const { return greedyKeys(); }

} // namespace kiln::kernels
