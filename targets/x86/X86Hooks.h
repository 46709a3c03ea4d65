// The x86 target's answers to the shared lowering (targets/common/TargetHooks.h),
// for one CPU: its features choose the instruction family of the GEMMs.
#pragma once

#include "targets/common/TargetHooks.h"
#include "targets/x86/CpuTarget.h"

namespace kiln::x86 {

// How a CPU multiplies bf16 matrices, best first. Every family reads the
// same VNNI-blocked weights and bf16 activations and accumulates in f32.
enum class GemmFamily {
  Amx,        // AMX tiles: tdpbf16ps (Sapphire Rapids, Granite Rapids: Xeon 6)
  Avx512Bf16, // AVX-512 BF16 dot products: vdpbf16ps (Zen 4/5, Cooper Lake)
  Fma,        // bf16 pairs split into f32, vfmadd231ps (AVX2 or AVX-512F)
  Vector,     // none of these: the generic vector GEMM on unpacked weights
};

// The best family the features allow.
GemmFamily gemmFamilyFor(const CpuTarget &cpu);
// "amx", "avx512bf16", "fma", "vector": kernel names and tilings say it.
const char *gemmFamilyName(GemmFamily family);
// The instruction that does the family's products ("tdpbf16ps", ...).
const char *gemmFamilyInstruction(GemmFamily family);

class X86Hooks final : public kernels::TargetHooks {
public:
  explicit X86Hooks(CpuTarget cpu, int64_t maxParts = 64)
      : cpu(std::move(cpu)), family(gemmFamilyFor(this->cpu)), maxParts(maxParts) {}
  std::string name() const override { return "x86"; }
  std::optional<TiledGemm> tiledGemm(int64_t n, int64_t k, bool decodeStep) const override;
  // The family of a GEMM: the CPU's best, but a decode step's on an AMX CPU
  // with AVX-512 BF16 takes vdpbf16ps: a tile multiplies 16 rows, one a
  // conversation would leave 15 of padding, while vdpbf16ps' panels stream
  // the weights with less overhead (kiln-bench-x86-gemm measures both). All
  // of a decode step's entries take the same family, so that batched decode
  // and verify give decode's results bit for bit.
  GemmFamily familyFor(bool decodeStep) const;
  kernels::LaunchShape shape(kernels::Work work, int64_t maxTokens) const override;
  GemmFamily gemmFamily() const { return family; }

private:
  CpuTarget cpu;
  GemmFamily family;
  int64_t maxParts;
};

} // namespace kiln::x86
