// The AMDGCN target's answers to the shared lowering: prefill's GEMMs and
// expert stage on matrix cores (MfmaGemm.h, MfmaExperts.h), the shared warp
// kernels elsewhere, and one
// thread per piece of work, in blocks of whole 64-lane wavefronts (CDNA's
// wave size on gfx942 and gfx950).
#pragma once

#include "targets/common/GpuHooks.h"

namespace kiln::amdgcn {

class AmdgcnHooks final : public kernels::GpuTargetHooks {
public:
  std::string name() const override { return "amdgcn"; }
  std::optional<TiledGemm> tiledGemm(int64_t, int64_t) const override { return std::nullopt; }
  std::optional<MatrixGemm> matrixGemm(int64_t n, int64_t k, int64_t maxTokens,
                                       bool exactInput) const override;
  std::optional<MatrixExperts> matrixExperts(int64_t experts, int64_t k, int64_t intermediate,
                                             int64_t latent, bool nvfp4,
                                             int64_t maxTokens) const override;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;
};

} // namespace kiln::amdgcn
