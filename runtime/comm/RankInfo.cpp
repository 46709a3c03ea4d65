#include "runtime/comm/RankInfo.h"

#include "runtime/cpu/RuntimeError.h"

#include <cstdlib>
#include <string>
#include <utility>

namespace kiln {
namespace {

// The first of the variables that is set, with its name.
std::optional<std::pair<std::string, std::string>>
firstSet(std::initializer_list<const char *> names) {
  for (const char *name : names)
    if (const char *value = std::getenv(name); value && *value)
      return std::make_pair(std::string(name), std::string(value));
  return std::nullopt;
}

long parseCount(const std::pair<std::string, std::string> &variable) {
  char *end = nullptr;
  const long value = std::strtol(variable.second.c_str(), &end, 10);
  if (end == variable.second.c_str() || *end != '\0' || value < 0 || value > 1 << 20)
    throw RuntimeError("environment: " + variable.first + "='" + variable.second +
                       "' is not a rank count");
  return value;
}

} // namespace

std::optional<RankInfo> rankFromEnvironment() {
  auto rank = firstSet({"KILN_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"});
  auto world = firstSet({"KILN_WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
  if (!rank && !world)
    return std::nullopt;
  if (!rank || !world)
    throw RuntimeError(std::string("environment: ") + (rank ? rank->first : world->first) +
                       " is set but not " + (rank ? "KILN_WORLD_SIZE" : "KILN_RANK") +
                       " (a rank needs both)");
  RankInfo info;
  info.rank = static_cast<int>(parseCount(*rank));
  info.world = static_cast<int>(parseCount(*world));
  if (info.world < 1 || info.rank >= info.world)
    throw RuntimeError("environment: rank " + std::to_string(info.rank) + " (" + rank->first +
                       ") is not below the world size " + std::to_string(info.world) + " (" +
                       world->first + ")");
  if (const char *path = std::getenv("KILN_RENDEZVOUS"); path && *path)
    info.rendezvous = path;
  else if (info.world > 1)
    throw RuntimeError("environment: KILN_RENDEZVOUS is not set: the ranks of a job meet "
                       "through a path they all reach (kiln-run --nproc sets it)");
  if (const char *timeout = std::getenv("KILN_COMM_TIMEOUT"); timeout && *timeout) {
    char *end = nullptr;
    info.timeoutSeconds = std::strtod(timeout, &end);
    if (end == timeout || *end != '\0' || !(info.timeoutSeconds > 0))
      throw RuntimeError(std::string("environment: KILN_COMM_TIMEOUT='") + timeout +
                         "' is not a positive number of seconds");
  }
  return info;
}

int localRank() {
  const char *value = std::getenv("KILN_LOCAL_RANK");
  return value && *value ? std::atoi(value) : 0;
}

int localWorldSize() {
  const char *value = std::getenv("KILN_LOCAL_WORLD_SIZE");
  const int ranks = value && *value ? std::atoi(value) : 1;
  return ranks > 0 ? ranks : 1;
}

} // namespace kiln
