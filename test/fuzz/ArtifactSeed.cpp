// Writes the artifact fuzzer's seed: the unit tests' minimal artifact (a
// few kilobytes holding every table the checks walk), sealed as kilnc seals.
//   kiln-artifact-fuzz-seed OUT.kiln
#include "runtime/core/AtomicFile.h"
#include "test/unit/artifact/ArtifactTestUtil.h"

#include <cstdio>

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: kiln-artifact-fuzz-seed OUT.kiln\n");
    return 2;
  }
  const std::vector<uint8_t> bytes = kiln::artifact_test::minimalArtifactBytes();
  kiln::writeFileAtomically(argv[1], bytes.data(), bytes.size());
  return 0;
}
