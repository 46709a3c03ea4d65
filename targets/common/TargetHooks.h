// What the shared kernel lowering asks a target: the few decisions that
// differ between CPUs and GPUs, so that one lowering and one set of kernel
// descriptions serve every target (x86 today, nvptx and amdgcn alike).
#pragma once

#include "targets/common/KernelSpec.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::kernels {

// How many independent pieces of work a launch has: constant + perToken * T.
// A GPU kernel that shares data across a block (shared memory, barriers)
// names the block it was written for: `block` threads, which divide the work.
struct Work {
  int64_t constant = 0;
  int64_t perToken = 0;
  int64_t block = 0;
};

// A launch's shape: CPU parts, or GPU blocks of threads.
struct LaunchShape {
  int64_t maxParts = 1;                      // CPU: parts the runtime may run at once
  std::optional<Work> gridBlocks;            // GPU: blocks (may grow with T)
  int64_t blockThreads = 0;                  // GPU: threads per block
};

class TargetHooks {
public:
  virtual ~TargetHooks() = default;
  virtual std::string name() const = 0;
  virtual bool isGpu() const = 0;
  // A tile-based GEMM y[T, n] = x_bf16[T, k] · Wᵀ for weights in the
  // target's tile layout (x86: AMX VNNI blocks), or none: the vector GEMM.
  virtual std::optional<KernelSpec> tiledGemm(int64_t n, int64_t k) const = 0;
  // The shape of a launch with `work` pieces, for entry points of up to
  // `maxTokens` tokens.
  virtual LaunchShape shape(Work work, int64_t maxTokens) const = 0;
};

} // namespace kiln::kernels
