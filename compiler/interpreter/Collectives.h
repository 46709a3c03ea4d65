// Collectives over simulated ranks: what shard.all_reduce, all_gather,
// reduce_scatter, all_to_all and all_slice compute, given every member's
// input. Groups and in-group order follow the shard dialect: ranks are
// linearised row-major over the grid, and a group is the ranks that agree on
// every grid axis not listed in grid_axes, ordered by the listed axes.
#pragma once

#include "compiler/interpreter/HostTensor.h"

#include <cstdint>
#include <vector>

namespace kiln::interp {

enum class Reduction { Sum, Max, Min, Product };

// The ranks of `rank`'s group, in in-group order.
std::vector<int64_t> groupOf(const std::vector<int64_t> &gridShape,
                             const std::vector<int64_t> &gridAxes, int64_t rank);

HostTensor reduceAll(const std::vector<const HostTensor *> &members, Reduction kind);
HostTensor concatAxis(const std::vector<const HostTensor *> &parts, int64_t axis);
// Piece `index` of `count` equal pieces along `axis`.
HostTensor sliceAxis(const HostTensor &t, int64_t axis, int64_t index, int64_t count);

} // namespace kiln::interp
