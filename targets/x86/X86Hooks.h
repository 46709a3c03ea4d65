// The x86 target's answers to the shared lowering (targets/common/TargetHooks.h).
#pragma once

#include "targets/common/TargetHooks.h"

namespace kiln::x86 {

class X86Hooks final : public kernels::TargetHooks {
public:
  explicit X86Hooks(int64_t maxParts = 64) : maxParts(maxParts) {}
  std::string name() const override { return "x86"; }
  bool isGpu() const override { return false; }
  std::optional<kernels::KernelSpec> tiledGemm(int64_t n, int64_t k) const override;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;

private:
  int64_t maxParts;
};

} // namespace kiln::x86
