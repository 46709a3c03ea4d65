// What one rank of an artifact needs in device memory, read from the artifact
// alone: its weight pieces, the activation arena (the runtime allocates one,
// for the largest entry point), the KV cache per token of context (global layers,
// for every conversation) and the sliding layers' rings, full. kilnc prints it
// and refuses an artifact that cannot fit; kiln-dump prints it.
#pragma once

#include "runtime/artifact/Artifact.h"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace kiln {

struct ArtifactMemory {
  uint64_t weightBytes = 0;
  uint64_t arenaBytes = 0;            // the largest entry point's arena (they share one)
  std::string arenas;                 // "prefill 64 tokens 12.0 MiB, decode 1 token 1.2 MiB"
  uint64_t globalKvBytesPerToken = 0; // K and V of every global layer, one conversation
  uint64_t slidingKvBytesPerToken = 0;
  uint64_t slidingKvBytes = 0; // every sliding ring full, all conversations
  std::string kvDtype;         // "f32"
  int64_t conversations = 1;   // the decode_batch entry's, or 1
  uint64_t exchangeBytes = 0;  // peer exchange memory, every comm group's
  int64_t pageTokens = 0;      // the global caches' page (kilnc --kv-page-tokens), 0 unpaged
  // The device and reserve the compiler planned for (Target.memory_bytes,
  // reserve_bytes; 0: no plan).
  uint64_t plannedDeviceBytes = 0, plannedReserveBytes = 0;
};

ArtifactMemory artifactMemory(const Artifact &artifact);

// Tokens of context whose global-layer KV fits in `deviceBytes` after the
// weights, arenas, sliding rings and `reserveBytes` (every conversation's,
// in all); negative when those alone do not fit.
int64_t kvTokensThatFit(const ArtifactMemory &memory, uint64_t deviceBytes, uint64_t reserveBytes);

// A paged artifact's pool: the pages of pageTokens positions whose K and V,
// in every global layer, fit in `deviceBytes` after the weights, arena,
// sliding rings, `reserveBytes` and `otherBytes` (kiln-serve: its saved
// histories' ring copies), and the runtime's scratch page. Negative when
// not one fits; 0 for an unpaged artifact.
int64_t kvPagesThatFit(const ArtifactMemory &memory, uint64_t deviceBytes, uint64_t reserveBytes,
                       uint64_t otherBytes = 0);

// The plan as lines indented by two; with a device size, also the reserve,
// the KV tokens (and a paged artifact's pages) that fit and, when nothing
// fits, "does not fit: ...".
// Returns false when it does not fit.
bool printMemoryPlan(std::ostream &out, const ArtifactMemory &memory,
                     std::optional<uint64_t> deviceBytes, uint64_t reserveBytes);

} // namespace kiln
