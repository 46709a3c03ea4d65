// The AMDGCN target's answers to the shared lowering: the vector GEMM (no
// MFMA tiling yet) and one thread per piece of work, in blocks of whole
// 64-lane wavefronts (CDNA's wave size on gfx942 and gfx950).
#pragma once

#include "targets/common/TargetHooks.h"

namespace kiln::amdgcn {

class AmdgcnHooks final : public kernels::TargetHooks {
public:
  std::string name() const override { return "amdgcn"; }
  bool isGpu() const override { return true; }
  std::optional<kernels::KernelSpec> tiledGemm(int64_t, int64_t) const override {
    return std::nullopt;
  }
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;
};

} // namespace kiln::amdgcn
