// Writing a file so that readers see either the old file or the whole new
// one, never a partial write: kilnc writes its artifacts with this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

// Writes `size` bytes to a new temporary file in the directory of `path`,
// fsyncs it, renames it over `path` and fsyncs the directory. On failure the
// temporary file is removed, `path` is left as it was, and an ArtifactError
// (runtime/artifact/Artifact.h) names `path` and the reason.
void writeFileAtomically(const std::string &path, const uint8_t *data,
                         size_t size);

} // namespace kiln
