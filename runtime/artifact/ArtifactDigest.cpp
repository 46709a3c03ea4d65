#include "runtime/artifact/ArtifactDigest.h"

#include "runtime/artifact/kiln_artifact_generated.h"

#define XXH_INLINE_ALL // header-only: no library to link, here or in static builds
#include <xxhash.h>

#include <cstdio>

namespace kiln::artifact {
namespace {

// Where the Digests struct lies in the buffer (it is stored inline in the
// root table).
size_t digestsOffset(const uint8_t *data, const Digests *digests) {
  return static_cast<size_t>(reinterpret_cast<const uint8_t *>(digests) - data);
}

uint64_t libraryDigest(const Artifact &root) {
  const auto *blob = root.library() ? root.library()->blob() : nullptr;
  return blob ? XXH64(blob->data(), blob->size(), 0) : XXH64(nullptr, 0, 0);
}

// GCC warns about a pointer xxhash forms (and never uses) for short inputs.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
uint64_t artifactDigest(const uint8_t *data, size_t size, size_t at) {
  static const uint8_t zeros[sizeof(Digests)] = {};
  XXH64_state_t state;
  XXH64_reset(&state, 0);
  XXH64_update(&state, data, at);
  XXH64_update(&state, zeros, sizeof zeros);
  XXH64_update(&state, data + at + sizeof(Digests), size - at - sizeof(Digests));
  return XXH64_digest(&state);
}
#pragma GCC diagnostic pop

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

} // namespace

void sealArtifact(uint8_t *data, size_t size) {
  const Artifact *root = GetArtifact(data);
  const size_t at = digestsOffset(data, root->digests());
  const uint64_t library = libraryDigest(*root);
  const uint64_t whole = artifactDigest(data, size, at);
  // Digests is a struct of two little-endian u64: library, then artifact.
  flatbuffers::WriteScalar(data + at, library);
  flatbuffers::WriteScalar(data + at + sizeof(uint64_t), whole);
}

std::string digestMismatch(const uint8_t *data, size_t size) {
  const Artifact *root = GetArtifact(data);
  const Digests *digests = root->digests();
  if (!digests)
    return "digests: none (an artifact written before schema 1.6, or damaged): recompile it with "
           "this kilnc";
  const size_t at = digestsOffset(data, digests);
  if (at + sizeof(Digests) > size)
    return "digests: outside the file";
  const uint64_t library = libraryDigest(*root);
  if (library != digests->library())
    return "corrupt: the kernel library's bytes do not match their digest (XXH64 " +
           hex(digests->library()) + " recorded, " + hex(library) + " computed)";
  const uint64_t whole = artifactDigest(data, size, at);
  if (whole != digests->artifact())
    return "corrupt: the artifact's bytes do not match its digest (XXH64 " +
           hex(digests->artifact()) + " recorded, " + hex(whole) + " computed)";
  return "";
}

} // namespace kiln::artifact
