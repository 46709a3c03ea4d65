// An x86-64 CPU as kilnc compiles for it (`kilnc --target=x86 --cpu=NAME`):
// LLVM's name for it, which tunes scheduling, and the instruction-set
// features the kernels may use, which the artifact records and the runtime
// checks before it loads the kernels. The features are exactly those: code
// generation starts from the x86-64 baseline and enables each listed one, so
// nothing the runtime cannot check (or the CPU lacks) reaches the library.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::x86 {

struct CpuTarget {
  std::string cpu;                   // LLVM's name; "host" resolved ("znver4")
  std::vector<std::string> features; // LLVM spellings, sorted, no '+'

  bool has(std::string_view feature) const;
  // Widest vector registers: 512 (AVX-512F), 256 (AVX) or 128 bits.
  int vectorBits() const;
  // "+avx,+avx2,..." for LLVM's target machine.
  std::string llvmFeatures() const;
};

// Resolves --cpu: one of LLVM's x86-64 CPU names ("sapphirerapids",
// "znver4", "x86-64-v3", ...), or "host" for this machine's CPU with the
// features it and the OS really enable. Returns nullopt with `error` saying
// what is accepted for an unknown name.
std::optional<CpuTarget> resolveCpu(const std::string &name, std::string &error);

// LLVM's x86-64 CPU names, sorted (kilnc --cpu=help).
std::vector<std::string> knownCpuNames();

} // namespace kiln::x86
