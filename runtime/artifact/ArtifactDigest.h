// An artifact's digests (schema 1.6, Artifact.digests): XXH64 of the kernel
// library's bytes and of the whole file with the digests themselves read as
// zeros, so that a change to any byte is caught when the artifact loads,
// before anything in it is believed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::artifact {

// Fills in the digests of a finished artifact flatbuffer whose root carries
// a Digests struct (any value). Writers call it last.
void sealArtifact(uint8_t *data, size_t size);

// Why a verified artifact's digests do not hold ("" when they do): missing,
// or which digest differs, with the expected and the computed value.
std::string digestMismatch(const uint8_t *data, size_t size);

} // namespace kiln::artifact
