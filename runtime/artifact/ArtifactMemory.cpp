#include "runtime/artifact/ArtifactMemory.h"

#include "runtime/core/DType.h"

#include <algorithm>
#include <cstdio>

namespace kiln {
namespace fb = kiln::artifact;
namespace {

std::string gib(uint64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / double(1ull << 30));
  return text;
}

std::string mib(uint64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof(text), "%.1f MiB", double(bytes) / double(1ull << 20));
  return text;
}

} // namespace

ArtifactMemory artifactMemory(const Artifact &artifact) {
  const fb::Artifact &root = artifact.root();
  ArtifactMemory memory;
  if (const auto *weights = root.weights())
    for (const fb::WeightBinding *weight : *weights)
      memory.weightBytes += weight->bytes();
  for (const fb::EntryPoint *entry : *root.entry_points()) {
    memory.conversations = std::max<int64_t>(memory.conversations, entry->sequences());
    memory.arenaBytes = std::max<uint64_t>(memory.arenaBytes, entry->arena_bytes());
    if (!memory.arenas.empty())
      memory.arenas += ", ";
    memory.arenas += (entry->name() ? entry->name()->str() : std::string("?")) + " " +
                     std::to_string(entry->max_tokens()) +
                     (entry->max_tokens() == 1 ? " token " : " tokens ") +
                     mib(entry->arena_bytes());
  }
  if (const auto *caches = root.kv_caches())
    for (const fb::KvCache *cache : *caches) {
      const DType dtype = toDType(cache->dtype());
      memory.kvDtype = dtypeName(dtype);
      const uint64_t perToken = 2ull * cache->kv_heads() * cache->head_dim() * dtypeSize(dtype);
      if (cache->window() == 0) {
        memory.globalKvBytesPerToken += perToken;
        memory.pageTokens = cache->page_tokens();
      } else {
        memory.slidingKvBytesPerToken += perToken;
        memory.slidingKvBytes += perToken * (cache->ring() ? cache->ring() : cache->window());
      }
    }
  memory.slidingKvBytes *= static_cast<uint64_t>(memory.conversations);
  if (const auto *groups = root.comm_groups())
    for (const fb::CommGroup *group : *groups)
      memory.exchangeBytes += group->exchange_bytes();
  if (const fb::Target *target = root.target()) {
    memory.plannedDeviceBytes = target->memory_bytes();
    memory.plannedReserveBytes = target->reserve_bytes();
  }
  return memory;
}

int64_t kvTokensThatFit(const ArtifactMemory &memory, uint64_t deviceBytes, uint64_t reserveBytes) {
  const int64_t left =
      static_cast<int64_t>(deviceBytes) - static_cast<int64_t>(memory.weightBytes) -
      static_cast<int64_t>(memory.arenaBytes) - static_cast<int64_t>(memory.slidingKvBytes) -
      static_cast<int64_t>(memory.exchangeBytes) - static_cast<int64_t>(reserveBytes);
  if (left < 0)
    return -1;
  return memory.globalKvBytesPerToken ? left / static_cast<int64_t>(memory.globalKvBytesPerToken)
                                      : left;
}

int64_t kvPagesThatFit(const ArtifactMemory &memory, uint64_t deviceBytes, uint64_t reserveBytes,
                       uint64_t otherBytes) {
  if (memory.pageTokens <= 0 || memory.globalKvBytesPerToken == 0)
    return 0;
  if (otherBytes > deviceBytes)
    return -1;
  const int64_t tokens = kvTokensThatFit(memory, deviceBytes - otherBytes, reserveBytes);
  return tokens < 0 ? -1 : tokens / memory.pageTokens - 1; // less the scratch page
}

bool printMemoryPlan(std::ostream &out, const ArtifactMemory &memory,
                     std::optional<uint64_t> deviceBytes, uint64_t reserveBytes) {
  out << "  weights               " << gib(memory.weightBytes) << " (" << memory.weightBytes
      << " bytes)\n"
      << "  activation arena      " << gib(memory.arenaBytes)
      << " (the largest entry point's: " << memory.arenas << ")\n"
      << "  KV per token          " << memory.globalKvBytesPerToken << " bytes in global layers, "
      << memory.slidingKvBytesPerToken << " in sliding layers (" << memory.kvDtype
      << "); sliding rings full: " << gib(memory.slidingKvBytes) << " for " << memory.conversations
      << (memory.conversations == 1 ? " conversation\n" : " conversations\n");
  if (memory.exchangeBytes)
    out << "  peer exchange         " << mib(memory.exchangeBytes)
        << " (the MegaMoE kernels' slots in this rank's memory)\n";
  if (!deviceBytes)
    return true;
  out << "  reserved              " << gib(reserveBytes) << " (runtime, collectives)\n";
  const int64_t tokens = kvTokensThatFit(memory, *deviceBytes, reserveBytes);
  if (tokens < 0) {
    out << "  does not fit: weights " << gib(memory.weightBytes) << " + arena "
        << gib(memory.arenaBytes) << " + sliding KV " << gib(memory.slidingKvBytes)
        << (memory.exchangeBytes ? " + exchange " + gib(memory.exchangeBytes) : std::string())
        << " + reserve " << gib(reserveBytes) << " > " << gib(*deviceBytes) << "\n";
    return false;
  }
  out << "  KV tokens that fit    " << tokens << " (global layers' context, all conversations, in "
      << gib(static_cast<uint64_t>(tokens) * memory.globalKvBytesPerToken) << ")\n";
  if (const int64_t pages = kvPagesThatFit(memory, *deviceBytes, reserveBytes); pages > 0)
    out << "  KV pages that fit     " << pages << " of " << memory.pageTokens
        << " positions (kiln-serve's pool by default, less its saved histories' ring copies)\n";
  return true;
}

} // namespace kiln
