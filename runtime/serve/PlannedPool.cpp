#include "runtime/serve/PlannedPool.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace kiln::serve {
namespace {

// One conversation's sliding rings: what a saved history copies.
uint64_t ringBytes(const ArtifactMemory &memory) {
  return memory.slidingKvBytes / static_cast<uint64_t>(std::max<int64_t>(memory.conversations, 1));
}

} // namespace

std::optional<PlannedPool> plannedPool(const ArtifactMemory &memory, int64_t contextLength,
                                       int64_t savedHistories, bool prefixReuse) {
  if (memory.pageTokens <= 0 || memory.plannedDeviceBytes == 0)
    return std::nullopt;
  const int64_t saved = prefixReuse ? savedHistories : 0;
  const uint64_t copies = ringBytes(memory) * static_cast<uint64_t>(saved);
  const int64_t pages =
      kvPagesThatFit(memory, memory.plannedDeviceBytes, memory.plannedReserveBytes, copies);
  const auto gib = [](uint64_t bytes) { return double(bytes) / double(uint64_t{1} << 30); };
  char planned[160];
  std::snprintf(planned, sizeof planned,
                "the memory plan for %.2f GiB a device, %.2f GiB reserved, %.2f GiB of saved "
                "histories' rings",
                gib(memory.plannedDeviceBytes), gib(memory.plannedReserveBytes), gib(copies));
  if (pages < 1)
    throw std::runtime_error(std::string(planned) +
                             " leaves no room for a KV page: give --kv-pages or --kv-memory, "
                             "fewer --saved-histories, or compile with a larger --device-memory");
  const int64_t most = (memory.conversations + saved) *
                       ((contextLength + memory.pageTokens - 1) / memory.pageTokens);
  PlannedPool pool;
  pool.pages = std::min({pages, most, (int64_t{1} << 31) - 2});
  pool.source = std::string("by ") + planned +
                (pages > most ? ", at most the slots' and saved histories' whole contexts" : "");
  return pool;
}

int64_t defaultSavedHistories(const ArtifactMemory &memory) {
  const int64_t fewest = 4 * memory.conversations, most = 64 * memory.conversations;
  if (memory.pageTokens <= 0 || memory.plannedDeviceBytes == 0)
    return fewest;
  const int64_t pages =
      kvPagesThatFit(memory, memory.plannedDeviceBytes, memory.plannedReserveBytes);
  const uint64_t rings = ringBytes(memory);
  if (pages <= 0)
    return fewest;
  if (rings == 0)
    return most;
  const uint64_t eighth = static_cast<uint64_t>(pages) * static_cast<uint64_t>(memory.pageTokens) *
                          memory.globalKvBytesPerToken / 8;
  return std::clamp(static_cast<int64_t>(std::min<uint64_t>(eighth / rings, uint64_t(most))),
                    fewest, most);
}

} // namespace kiln::serve
