// What the host CPU can run: the feature names an artifact's target.features
// lists (LLVM spellings: "avx512bf16", "amx-bf16", ...), and the permission
// Linux requires before a process may use AMX tiles.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

// cpuid leaf 7: AMX-BF16 (EDX bit 22) and AMX-TILE (EDX bit 24).
bool cpuHasAmx();

// Whether the CPU (and the OS, for AVX and AVX-512 register state) supports
// the feature; nullopt for a name this runtime does not know. A leading '+'
// is ignored.
std::optional<bool> cpuHasFeature(std::string_view name);

// Every feature name cpuHasFeature knows.
std::vector<std::string> knownCpuFeatures();

// The features of an x86-64 microarchitecture level ("x86-64", "x86-64-v2",
// "x86-64-v3", "x86-64-v4": kilnc --cpu names that run on every CPU of the
// level), or nullopt for another name.
std::optional<std::vector<std::string>> x86LevelFeatures(std::string_view level);

// The highest of those levels this CPU runs: the portable --cpu to suggest
// when an artifact asks for more than this CPU has.
std::string hostX86Level();

// Whether any of the names is an AMX feature ("amx-*").
bool needsAmx(const std::vector<std::string> &features);

// Asks Linux for permission to use the AMX tile data state
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the first call makes
// the request, later calls return or throw as it did. Throws RuntimeError if
// the kernel refuses (no AMX, or a kernel older than 5.16).
void requestAmx();

} // namespace kiln
