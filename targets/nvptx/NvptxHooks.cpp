#include "targets/nvptx/NvptxHooks.h"

#include <algorithm>

namespace kiln::nvptx {

// A fixed amount of work: blocks of up to 128 threads covering it. Work that
// grows with T: one 32-thread block per piece per token, so the grid grows
// with T too (threads past the work find an empty range and return); work
// given in whole blocks of 128 threads per token (warp kernels) gets those.
kernels::LaunchShape NvptxHooks::shape(kernels::Work work, int64_t) const {
  kernels::LaunchShape shape;
  if (work.block > 0) { // the kernel's own block
    shape.blockThreads = work.block;
    shape.gridBlocks = kernels::Work{work.constant / work.block, work.perToken / work.block};
  } else if (work.perToken == 0) {
    int64_t items = std::max<int64_t>(1, work.constant);
    shape.blockThreads = std::min<int64_t>(128, (items + 31) / 32 * 32);
    shape.gridBlocks = kernels::Work{(items + shape.blockThreads - 1) / shape.blockThreads, 0};
  } else if (work.constant == 0 && work.perToken % 32 == 0 && work.perToken <= 128) {
    // Warp and row kernels: one block of whole warps per token.
    shape.blockThreads = work.perToken;
    shape.gridBlocks = kernels::Work{0, 1};
  } else if (work.constant == 0 && work.perToken % 128 == 0) {
    // Warp kernels: four warps a block.
    shape.blockThreads = 128;
    shape.gridBlocks = kernels::Work{0, work.perToken / 128};
  } else {
    shape.blockThreads = 32;
    shape.gridBlocks = kernels::Work{work.constant, work.perToken};
  }
  return shape;
}

} // namespace kiln::nvptx
