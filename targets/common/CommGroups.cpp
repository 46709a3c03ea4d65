#include "targets/common/CommGroups.h"

#include <algorithm>
#include <map>

namespace kiln::kernels {

CommGroupInfo partitionGrid(const std::string &gridName, const std::vector<int64_t> &shape,
                            const std::vector<int64_t> &axes) {
  CommGroupInfo info;
  info.name = gridName + "[";
  for (size_t i = 0; i < axes.size(); ++i)
    info.name += (i ? ", " : "") + std::to_string(axes[i]);
  info.name += "]";
  int64_t world = 1;
  for (int64_t d : shape)
    world *= d;
  for (int64_t a : axes)
    info.size *= shape[a];
  // Groups keyed by the coordinates off the listed axes, in order of their
  // lowest rank; members placed by their coordinates on the listed axes.
  std::map<std::vector<int64_t>, std::vector<int64_t>> members;
  std::vector<std::vector<int64_t>> order;
  for (int64_t rank = 0; rank < world; ++rank) {
    std::vector<int64_t> coord(shape.size());
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1, r = rank; d >= 0; --d) {
      coord[d] = r % shape[d];
      r /= shape[d];
    }
    std::vector<int64_t> key;
    for (size_t d = 0; d < shape.size(); ++d)
      if (std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) == axes.end())
        key.push_back(coord[d]);
    int64_t at = 0;
    for (int64_t a : axes)
      at = at * shape[a] + coord[a];
    auto [it, inserted] = members.try_emplace(key, std::vector<int64_t>(info.size, -1));
    if (inserted)
      order.push_back(key);
    it->second[at] = rank;
  }
  for (const std::vector<int64_t> &key : order)
    info.ranks.insert(info.ranks.end(), members[key].begin(), members[key].end());
  return info;
}

int64_t CommGroups::add(CommGroupInfo group) {
  for (size_t i = 0; i < groups_.size(); ++i)
    if (groups_[i].size == group.size && groups_[i].ranks == group.ranks)
      return static_cast<int64_t>(i);
  groups_.push_back(std::move(group));
  return static_cast<int64_t>(groups_.size()) - 1;
}

} // namespace kiln::kernels
