#include "targets/x86/X86Hooks.h"

#include "targets/x86/AmxGemm.h"

#include <algorithm>

namespace kiln::x86 {

std::optional<kernels::KernelSpec> X86Hooks::tiledGemm(int64_t n, int64_t k) const {
  if (!amxCovers(n, k))
    return std::nullopt;
  return linearAmx(n, k);
}

// Parts for the thread pool: as many as there are pieces of work at the
// largest call, up to maxParts (the runtime clamps to its threads).
kernels::LaunchShape X86Hooks::shape(kernels::Work work, int64_t maxTokens) const {
  kernels::LaunchShape shape;
  shape.maxParts = std::clamp<int64_t>(work.constant + work.perToken * maxTokens, 1, maxParts);
  return shape;
}

} // namespace kiln::x86
