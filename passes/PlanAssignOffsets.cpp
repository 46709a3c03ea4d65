// plan-assign-offsets: memory planning. Every plan.alloc of an entry point
// gets a byte offset in one arena; buffers whose lifetimes overlap never
// share bytes, and a buffer reuses the bytes of buffers that died before it
// was defined (first fit, lowest offset). Sizes are taken at max_tokens.
#include "passes/Passes.h"

#include "dialects/plan/PlanOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"

#include <algorithm>

namespace kiln {

#define GEN_PASS_DEF_PLANASSIGNOFFSETS
#include "passes/Passes.h.inc"

namespace {

constexpr int64_t kAlignment = 64;

struct Interval {
  plan::AllocOp alloc;
  int64_t first = 0, last = 0; // step indices of definition and last use
  int64_t bytes = 0;
  int64_t offset = -1;
};

struct PlanAssignOffsets final : impl::PlanAssignOffsetsBase<PlanAssignOffsets> {
  void runOnOperation() override {
    getOperation().walk([&](plan::EntryOp entry) { plan(entry); });
  }

  void plan(plan::EntryOp entry) {
    // Step index of every op, and the alloc each buffer value (or view of
    // it) stands for.
    llvm::DenseMap<mlir::Operation *, int64_t> step;
    llvm::DenseMap<mlir::Value, int64_t> owner; // value -> index into intervals
    std::vector<Interval> intervals;
    int64_t index = 0;
    for (mlir::Operation &op : entry.getBody().front()) {
      step[&op] = index;
      if (auto alloc = llvm::dyn_cast<plan::AllocOp>(op)) {
        owner[alloc.getBuffer()] = static_cast<int64_t>(intervals.size());
        intervals.push_back({alloc, index, index, alloc.bytesFor(entry.getMaxTokens())});
      } else if (auto view = llvm::dyn_cast<plan::ViewOp>(op)) {
        auto it = owner.find(view.getSource());
        if (it != owner.end())
          owner[view.getView()] = it->second;
      }
      for (mlir::Value operand : op.getOperands())
        if (auto it = owner.find(operand); it != owner.end())
          intervals[it->second].last = std::max(intervals[it->second].last, index);
      ++index;
    }

    // First fit in definition order against every buffer still alive.
    int64_t arena = 0;
    for (size_t i = 0; i < intervals.size(); ++i) {
      Interval &buffer = intervals[i];
      std::vector<std::pair<int64_t, int64_t>> taken; // [begin, end) of live buffers
      for (size_t j = 0; j < i; ++j)
        if (intervals[j].last >= buffer.first)
          taken.emplace_back(intervals[j].offset, intervals[j].offset + intervals[j].bytes);
      std::sort(taken.begin(), taken.end());
      int64_t offset = 0;
      for (auto [begin, end] : taken) {
        if (offset + buffer.bytes <= begin)
          break;
        offset = std::max(offset, (end + kAlignment - 1) / kAlignment * kAlignment);
      }
      buffer.offset = offset;
      arena = std::max(arena, offset + buffer.bytes);
      buffer.alloc.setOffset(offset);
      ++numPlanned;
    }
    entry.setArenaBytes((arena + kAlignment - 1) / kAlignment * kAlignment);
  }
};

} // namespace
} // namespace kiln
