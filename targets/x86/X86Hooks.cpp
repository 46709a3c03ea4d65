#include "targets/x86/X86Hooks.h"

#include "targets/common/Generators.h"

#include "targets/x86/AmxGemm.h"
#include "targets/x86/VnniGemm.h"

#include <algorithm>

namespace kiln::x86 {

GemmFamily gemmFamilyFor(const CpuTarget &cpu) {
  if (cpu.has("amx-tile") && cpu.has("amx-bf16"))
    return GemmFamily::Amx;
  if (cpu.has("avx512bf16"))
    return GemmFamily::Avx512Bf16;
  if (cpu.has("fma") && cpu.has("avx2"))
    return GemmFamily::Fma;
  return GemmFamily::Vector;
}

const char *gemmFamilyName(GemmFamily family) {
  switch (family) {
  case GemmFamily::Amx:
    return "amx";
  case GemmFamily::Avx512Bf16:
    return "avx512bf16";
  case GemmFamily::Fma:
    return "fma";
  case GemmFamily::Vector:
    break;
  }
  return "vector";
}

const char *gemmFamilyInstruction(GemmFamily family) {
  switch (family) {
  case GemmFamily::Amx:
    return "tdpbf16ps";
  case GemmFamily::Avx512Bf16:
    return "vdpbf16ps";
  case GemmFamily::Fma:
    return "vfmadd231ps";
  case GemmFamily::Vector:
    break;
  }
  return "mulps/addps";
}

GemmFamily X86Hooks::familyFor(bool decodeStep) const {
  if (family == GemmFamily::Amx && decodeStep && cpu.has("avx512bf16"))
    return GemmFamily::Avx512Bf16;
  return family;
}

std::optional<kernels::TargetHooks::TiledGemm> X86Hooks::tiledGemm(int64_t n, int64_t k,
                                                                   bool decodeStep) const {
  const GemmFamily chosen = familyFor(decodeStep);
  if (n % 16 != 0 || k % 32 != 0) // whole VNNI blocks
    return std::nullopt;
  // Every family reads the weights in VNNI blocks and a bf16 copy of x.
  TiledGemm gemm;
  gemm.weights = kernels::Transform::VnniBf16;
  gemm.cast = kernels::castToBf16(k);
  gemm.castWork = kernels::Work{0, 1};
  switch (chosen) {
  case GemmFamily::Amx:
    gemm.kernel = linearAmx(n, k);
    gemm.work = kernels::Work{n / 16, 0};
    return gemm;
  case GemmFamily::Avx512Bf16:
  case GemmFamily::Fma: {
    VnniGemmTiling tiling = vnniGemmTiling(chosen == GemmFamily::Avx512Bf16, cpu.vectorBits(), n);
    gemm.kernel = linearVnni(tiling, n, k);
    gemm.work = kernels::Work{tiling.panels(n), 0};
    return gemm;
  }
  case GemmFamily::Vector:
    break;
  }
  return std::nullopt;
}

// Parts for the thread pool: as many as there are pieces of work at the
// largest call, up to maxParts (the runtime clamps to its threads).
kernels::LaunchShape X86Hooks::shape(kernels::Work work, int64_t maxTokens) const {
  kernels::LaunchShape shape;
  shape.maxParts = std::clamp<int64_t>(work.constant + work.perToken * maxTokens, 1, maxParts);
  return shape;
}

} // namespace kiln::x86
