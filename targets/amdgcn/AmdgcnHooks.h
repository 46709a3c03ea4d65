// The AMDGCN target's answers to the shared lowering, for one chip: prefill's
// GEMMs and expert stage on CDNA's matrix cores (MfmaGemm.h, MfmaExperts.h),
// the shared warp kernels elsewhere, and one thread per piece of work, in
// blocks of whole wavefronts of the chip's size.
#pragma once

#include "runtime/core/Chip.h"
#include "targets/common/GpuHooks.h"

namespace kiln::amdgcn {

class AmdgcnHooks final : public kernels::GpuTargetHooks {
public:
  // `chip`: a row of the chip table (runtime/core/Chips.def): its wave size
  // shapes the launches, its matrix cores (Mfma) the prefill kernels.
  explicit AmdgcnHooks(const Chip &chip) : chip(chip) {}
  std::string name() const override { return "amdgcn"; }
  std::optional<TiledGemm> tiledGemm(int64_t, int64_t, bool) const override { return std::nullopt; }
  std::optional<MatrixGemm> matrixGemm(int64_t n, int64_t k, int64_t maxTokens,
                                       bool exactInput) const override;
  std::optional<MatrixExperts> matrixExperts(int64_t experts, int64_t k, int64_t intermediate,
                                             int64_t latent, bool nvfp4,
                                             int64_t maxTokens) const override;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;

private:
  const Chip &chip;
};

} // namespace kiln::amdgcn
