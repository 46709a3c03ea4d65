// What an nvptx artifact must satisfy before it reaches a GPU
// (docs/runtime-abi.md, "Kernels (nvptx target)"), and which devices its
// chip runs on. Pure checks: no driver is needed.
#pragma once

#include "runtime/artifact/Artifact.h"

#include <optional>
#include <string>
#include <string_view>

namespace kiln {

// An nvptx target chip, "sm_90a": compute capability 9.0, arch-specific.
struct NvptxChip {
  int major = 0, minor = 0;
  // 0: plain (runs on major.minor and later devices, which compile the
  // PTX); 'a': arch-specific (only on major.minor); 'f': family-specific
  // (on major.minor and later minors of the same major).
  char variant = 0;
};

// "sm_90" -> {9, 0}, "sm_90a" -> {9, 0, 'a'}, "sm_100f" -> {10, 0, 'f'};
// nullopt for anything else.
std::optional<NvptxChip> parseNvptxChip(std::string_view chip);

// Why a device of compute capability major.minor cannot run PTX for `chip`
// (spelled `name`), or "" when it can: "sm_100a needs compute capability
// 10.0".
std::string nvptxChipSupport(const NvptxChip &chip, std::string_view name, int major, int minor);

// Refuses an nvptx artifact (RuntimeError, "<source>: artifact is for nvptx
// sm_90, but ...") whose chip or features this runtime does not know, or
// whose launches break the nvptx rules: every launch needs Launch.grid and a
// Launch.block of 1..1024 threads, and takes no Part or Parts scalar.
void checkNvptxArtifact(const Artifact &artifact);

} // namespace kiln
