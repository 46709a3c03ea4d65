// What the GPU targets (nvptx, amdgcn) answer alike: the warp and block
// kernels of the row-wise ops, the GEMVs, split-KV attention and the expert
// stage, written once over the %part/%parts convention (a thread's global
// index and the thread count). A GPU target derives from this and adds its
// matrix-core kernels and launch shapes.
#pragma once

#include "targets/common/ExpertLists.h"
#include "targets/common/Generators.h"
#include "targets/common/TargetHooks.h"

namespace kiln::kernels {

class GpuTargetHooks : public TargetHooks {
public:
  KernelLaunch embedKernel(int64_t vocab, int64_t hidden) const override;
  KernelLaunch rmsNormKernel(int64_t width, double eps) const override;
  KernelLaunch headNormKernel(int64_t heads, int64_t headDim, double eps) const override;
  KernelLaunch ropeKernel(int64_t heads, int64_t headDim, double theta) const override;
  KernelLaunch headNormRopeKernel(int64_t heads, int64_t headDim, double eps,
                                  double theta) const override;
  KernelLaunch normResidualKernel(int64_t width, double postEps, double nextEps) const override;
  std::optional<KernelLaunch> rmsNormKernelWithBf16(int64_t width, double eps) const override;
  std::optional<KernelLaunch> normResidualKernelWithBf16(int64_t width, double postEps,
                                                         double nextEps) const override;
  KernelLaunch routerTopKKernel(int64_t experts, int64_t k) const override;
  Gemv gemv(int64_t n, int64_t k, int64_t maxRows, bool splitRows) const override;
  std::optional<Gemv> gemvPair(int64_t n, int64_t k) const override;
  std::optional<SplitAttention> splitAttention(const AttentionShape &shape, int64_t maxTokens,
                                               SequenceLayout sequences) const override;
  std::optional<ExpertStage> expertStage(int64_t experts, int64_t k, int64_t intermediate,
                                         int64_t latent, double eps, bool nvfp4, int64_t maxTokens,
                                         int64_t members) const override;
  std::optional<KernelSpec> greedyKernel() const override;

protected:
  // The expert stage of entries with a few items an expert (batched
  // decode), given that the grouped warp kernels fit: those kernels
  // (GroupedExperts.h) unless the target has better.
  virtual MatrixExperts fewItemsExperts(const ExpertTileShape &shape) const;
  // Whether the staged expert kernels (batch-1 NVFP4 decode) are to be built
  // broken on purpose: their gate/up dots leave out the last 1024-element
  // chunk (kilnc --inject-fault=staged-experts-drop-chunk on NVPTX).
  virtual bool stagedExpertsBroken() const { return false; }
  // Whether the k/v pair GEMV is to be built broken on purpose: its second
  // product reads the first's weights (kilnc --inject-fault=gemv-pair-first-weight).
  virtual bool gemvPairBroken() const { return false; }
  // Whether the experts' combine is to be built broken on purpose: each
  // token's last choice left out (kilnc --inject-fault=expert-combine-drop-choice).
  virtual bool expertCombineBroken() const { return false; }
  // The target's conversion of two E4M3 bytes to an f16 pair in one
  // instruction, with which the staged expert kernels compute in packed f16
  // pairs (PackedStagedDot.h); none: they compute in f32.
  virtual std::optional<E4m3PairToF16> e4m3PairToF16() const { return std::nullopt; }
  // The append of a call's new K/V to the caches after attention (the split
  // attention's, and a target's tiled attention's); head_dim must fit the
  // warp kernels (warpAttentionFits).
  KernelLaunch kvAppendKernel(const AttentionShape &shape, SequenceLayout sequences) const;
};

} // namespace kiln::kernels
