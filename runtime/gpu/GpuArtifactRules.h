// What every GPU target's artifact must say before a GPU runtime is loaded,
// whichever vendor's it is: a chip and features the runtime knows (asked of
// the target), and launches with a grid and a block of 1..1024 threads and
// no Part/Parts scalars (GPU kernels derive their part from their block and
// thread indices). Shared by the CUDA (nvptx) and HIP (amdgcn) backends.
#pragma once

#include "runtime/artifact/Artifact.h"

#include <string_view>

namespace kiln {

struct GpuTargetRules {
  std::string_view kind;  // "nvptx", "amdgcn"
  std::string_view chips; // the chips it knows, for messages
  bool (*knownChip)(std::string_view chip);
  bool (*knownFeature)(std::string_view feature);
};

// Throws RuntimeError naming the artifact, its target and, for a launch, the
// entry point, step, kernel and op.
void checkGpuArtifact(const Artifact &artifact, const GpuTargetRules &rules);

} // namespace kiln
