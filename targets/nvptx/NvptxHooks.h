// The NVPTX target's answers to the shared lowering: no tiled GEMM yet (the
// vector GEMM runs one output column per thread), and one thread per piece
// of work.
#pragma once

#include "targets/common/TargetHooks.h"

namespace kiln::nvptx {

class NvptxHooks final : public kernels::TargetHooks {
public:
  std::string name() const override { return "nvptx"; }
  bool isGpu() const override { return true; }
  std::optional<kernels::KernelSpec> tiledGemm(int64_t, int64_t) const override {
    return std::nullopt;
  }
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;
};

} // namespace kiln::nvptx
