// kiln-fuse-head-norm-rope: a per-head RMSNorm feeding the rotary embedding
// (Muse Spark's q_norm/k_norm path) as one kiln.head_norm_rope.
#include "passes/Passes.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_FUSEHEADNORMROPE
#include "passes/Passes.h.inc"

namespace {

struct FuseHeadNormRope final : impl::FuseHeadNormRopeBase<FuseHeadNormRope> {
  using FuseHeadNormRopeBase::FuseHeadNormRopeBase;

  void runOnOperation() override {
    SmallVector<RopeOp> ropes;
    getOperation().walk([&](RopeOp rope) { ropes.push_back(rope); });
    int64_t fused = 0;
    for (RopeOp rope : ropes) {
      // The norm's result must be read by the rope alone (another reader
      // would need the unrotated rows), in the rope's block.
      auto norm = rope.getInput().getDefiningOp<HeadNormOp>();
      if (!norm || !norm->hasOneUse() || norm->getBlock() != rope->getBlock())
        continue;
      OpBuilder b(rope);
      Location loc = FusedLoc::get(&getContext(), {norm.getLoc(), rope.getLoc()});
      // The norm comes before the rope, so its operands dominate the rope.
      auto op = HeadNormRopeOp::create(b, loc, rope.getType(), norm.getInput(), norm.getWeight(),
                                       rope.getPositions(), norm.getEpsAttr(), rope.getThetaAttr());
      rope.getResult().replaceAllUsesWith(op.getResult());
      rope.erase();
      norm.erase();
      ++fused;
    }
    numFused += fused;
    if (fused == 0)
      markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace kiln
