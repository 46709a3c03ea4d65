// kiln-serve's default KV page pool for a paged artifact: the pages that the
// memory plan kilnc made for its device leaves (kvPagesThatFit: after the
// weights, the arena, the sliding rings, the exchange and the reserve), less
// the saved histories' copies of their rings, and no more than the slots and
// the saved histories could ever hold, each a whole context (a small model
// compiled for a large device would otherwise take the device).
#pragma once

#include "runtime/artifact/ArtifactMemory.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::serve {

struct PlannedPool {
  int64_t pages = 0;
  // What sized it, for the banner: "the memory plan for 141.00 GiB a
  // device, 8.00 GiB reserved, 0.75 GiB of saved histories' rings".
  std::string source;
};

// None for an unpaged artifact or one without a plan (x86 compiled without
// --device-memory). Throws std::runtime_error where the plan leaves no room
// for one page. `savedHistories` counts only with `prefixReuse`.
std::optional<PlannedPool> plannedPool(const ArtifactMemory &memory, int64_t contextLength,
                                       int64_t savedHistories, bool prefixReuse);

// kiln-serve's default --saved-histories: 4 a slot; for a paged artifact
// with a memory plan, as many as their ring copies fit in an eighth of the
// memory the plan leaves for KV pages, at least 4 and at most 64 a slot.
// Prefix reuse across turns finds a session's history only while it is
// saved, so with more sessions than slots (an agentic replay at 128 users
// on 32 slots) a count fixed per slot forgets histories the device has
// room to keep.
int64_t defaultSavedHistories(const ArtifactMemory &memory);

} // namespace kiln::serve
