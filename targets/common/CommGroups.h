// The communication groups of a multi-rank plan: for a shard dialect grid
// and some of its axes, the partition of the world into groups (the ranks
// that agree on every other axis, ordered by the listed axes). Each distinct
// partition is kept once; plan.collective ops, weight slices and group:N
// scalars name them by index (docs/runtime-abi.md, comm_groups).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::kernels {

struct CommGroupInfo {
  std::string name;           // "tp[1, 2]": the grid and axes that first made it
  int64_t size = 1;           // ranks per group
  std::vector<int64_t> ranks; // every rank once, group after group
  // Peer-visible memory each member provides for kernels that exchange
  // through it (sites of 256-byte multiples, one after another).
  int64_t exchangeBytes = 0;
};

// The partition of the ranks of a grid of `shape` (ranks numbered row-major)
// into groups along `axes`.
CommGroupInfo partitionGrid(const std::string &gridName, const std::vector<int64_t> &shape,
                            const std::vector<int64_t> &axes);

class CommGroups {
public:
  // The index of `group`'s partition, added if new.
  int64_t add(CommGroupInfo group);
  const std::vector<CommGroupInfo> &all() const { return groups_; }
  // Reserves `bytes` of group `group`'s exchange memory; returns the offset.
  int64_t reserveExchange(int64_t group, int64_t bytes) {
    int64_t offset = groups_[group].exchangeBytes;
    groups_[group].exchangeBytes += bytes;
    return offset;
  }

private:
  std::vector<CommGroupInfo> groups_;
};

} // namespace kiln::kernels
