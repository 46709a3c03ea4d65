// libFuzzer target for artifacts. Each input is loaded twice: as it is
// (size, identifier, version, the flatbuffers verifier, trailing bytes and
// the digests must refuse what they should), and, where the flatbuffer
// verifies, sealed with fresh digests as kilnc would write it, so that the
// semantic checks behind the digests (targets, buffers inside their arenas,
// no overlapping operands, steps, kernels, the model's config) see mutated
// metadata too. Anything may be refused with ArtifactError; nothing else may
// escape, and nothing may crash or read out of bounds (ASan).
#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ArtifactDigest.h"

#include <cstdint>
#include <vector>

namespace {

void load(std::vector<uint8_t> bytes) {
  try {
    const kiln::Artifact artifact = kiln::Artifact::fromBytes(std::move(bytes), "fuzz.kiln");
    (void)artifact.modelFacts();
  } catch (const kiln::ArtifactError &) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  load(bytes);
  // Sealing needs a buffer the verifier accepts and a digests field.
  if (size < 8 || size >= (size_t{1} << 31) || !kiln::artifact::ArtifactBufferHasIdentifier(data))
    return 0;
  flatbuffers::Verifier verifier(bytes.data(), bytes.size());
  if (!kiln::artifact::VerifyArtifactBuffer(verifier) ||
      !kiln::artifact::GetArtifact(bytes.data())->digests())
    return 0;
  const auto *digests = kiln::artifact::GetArtifact(bytes.data())->digests();
  const size_t at = static_cast<size_t>(reinterpret_cast<const uint8_t *>(digests) - bytes.data());
  if (at + sizeof(*digests) > bytes.size())
    return 0;
  kiln::artifact::sealArtifact(bytes.data(), bytes.size());
  load(std::move(bytes));
  return 0;
}
