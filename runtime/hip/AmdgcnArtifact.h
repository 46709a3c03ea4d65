// What an amdgcn artifact must satisfy before it reaches a GPU
// (docs/runtime-abi.md, "Kernels (amdgcn target)"), and which devices its
// chip runs on. Pure checks: no HIP runtime is needed.
#pragma once

#include "runtime/artifact/Artifact.h"

#include <string>
#include <string_view>

namespace kiln {

// An amdgcn chip of the chip table (runtime/core/Chips.def): the chips this
// runtime runs.
bool isKnownAmdgcnChip(std::string_view chip);

// Why a device whose gcnArchName is `gcnArchName` ("gfx942:sramecc+:xnack-")
// cannot run code for `target` (its chip and its xnack / sramecc features),
// or "" when it can: "gfx950 code runs only on gfx950 devices", "its code
// needs xnack+ (feature +xnack)".
std::string amdgcnChipSupport(const artifact::Target &target, std::string_view gcnArchName);

// Refuses an amdgcn artifact (RuntimeError, "<source>: artifact is for amdgcn
// gfx950, but ...") whose chip or features this runtime does not know, or
// whose launches break the GPU rules: every launch needs Launch.grid and a
// Launch.block of 1..1024 threads, and takes no Part or Parts scalar.
void checkAmdgcnArtifact(const Artifact &artifact);

} // namespace kiln
