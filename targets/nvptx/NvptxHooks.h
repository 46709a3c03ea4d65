// The NVPTX target's answers to the shared lowering: the tensor-core GEMM
// (MmaGemm.h) for prefill-shaped products, and launch shapes for the warp
// and row kernels.
#pragma once

#include "targets/common/TargetHooks.h"

namespace kiln::nvptx {

class NvptxHooks final : public kernels::TargetHooks {
public:
  std::string name() const override { return "nvptx"; }
  bool isGpu() const override { return true; }
  std::optional<TiledGemm> tiledGemm(int64_t, int64_t) const override {
    return std::nullopt;
  }
  std::optional<MatrixGemm> matrixGemm(int64_t n, int64_t k, int64_t maxTokens) const override;
  std::optional<MatrixExperts> matrixExperts(int64_t experts, int64_t k, int64_t intermediate,
                                             int64_t latent, bool nvfp4,
                                             int64_t maxTokens) const override;
  std::optional<PeerMegaMoE> peerMegaMoE(const kernels::PeerMegaMoEShape &shape) const override;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;
};

} // namespace kiln::nvptx
