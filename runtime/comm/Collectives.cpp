#include "runtime/comm/Collectives.h"

namespace kiln {

GroupMembership membershipOf(const CommGroupSpec &group, int rank) {
  for (size_t at = 0; at < group.ranks.size(); ++at)
    if (group.ranks[at] == rank) {
      const size_t first = at / static_cast<size_t>(group.size) * static_cast<size_t>(group.size);
      GroupMembership membership;
      membership.members.assign(group.ranks.begin() + static_cast<std::ptrdiff_t>(first),
                                group.ranks.begin() + static_cast<std::ptrdiff_t>(
                                                          first + static_cast<size_t>(group.size)));
      membership.index = static_cast<int>(at - first);
      return membership;
    }
  throw RuntimeError("comm group '" + group.name + "' does not list rank " + std::to_string(rank));
}

} // namespace kiln
