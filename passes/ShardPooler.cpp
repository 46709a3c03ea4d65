// kiln-shard-pooler: under plain TP the latent MoE's pooler (H -> latent)
// and unpooler (latent -> H) are replicated, so every rank computes the same
// product. Split their output features over the TP group instead and
// all-gather the pieces (seed 001: "shard the unpooler first, then the
// pooler").
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_SHARDPOOLER
#include "passes/Passes.h.inc"

namespace {

// The value an expert stage reads its latent input from, and the value its
// combined output leaves through, whether or not it is fused or EP-sharded.
Value expertInput(Operation *op) {
  if (auto swiglu = llvm::dyn_cast<ExpertSwiGLUOp>(op))
    return swiglu.getInput();
  return llvm::cast<MegaMoEOp>(op).getInput();
}

Value expertOutput(Operation *op) {
  Value out;
  if (auto swiglu = llvm::dyn_cast<ExpertSwiGLUOp>(op)) {
    auto norm =
        swiglu->hasOneUse() ? llvm::dyn_cast<ExpertNormOp>(*swiglu->user_begin()) : ExpertNormOp();
    auto combine =
        norm && norm->hasOneUse() ? llvm::dyn_cast<CombineOp>(*norm->user_begin()) : CombineOp();
    if (!combine)
      return {};
    out = combine.getResult();
  } else {
    out = llvm::cast<MegaMoEOp>(op).getResult();
  }
  // Under EP the combined output is summed over the expert group first.
  if (out.hasOneUse())
    if (auto reduce = llvm::dyn_cast<shard::AllReduceOp>(*out.user_begin()))
      out = reduce.getResult();
  return out;
}

struct ShardPooler final : impl::ShardPoolerBase<ShardPooler> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module.lookupSymbol<shard::GridOp>(sharding::kTpGrid);
    if (!grid)
      return markAllAnalysesPreserved(); // no tensor parallelism: nothing is replicated
    int64_t tp = grid.getShape()[1] * grid.getShape()[2];
    SmallVector<shard::GridAxis> axes = {1, 2};

    SmallVector<Operation *> stages;
    module.walk([&](Operation *op) {
      if (llvm::isa<ExpertSwiGLUOp, MegaMoEOp>(op))
        stages.push_back(op);
    });
    for (Operation *stage : stages) {
      // Unpooler: the linear that reads the combined expert output.
      Value out = expertOutput(stage);
      LinearOp unpooler =
          out && out.hasOneUse() ? llvm::dyn_cast<LinearOp>(*out.user_begin()) : LinearOp();
      // Pooler: the linear behind the expert input norm.
      auto inputNorm = expertInput(stage).getDefiningOp<RmsNormOp>();
      LinearOp pooler = inputNorm ? inputNorm.getInput().getDefiningOp<LinearOp>() : LinearOp();
      for (LinearOp linear : {unpooler, pooler}) {
        if (!linear)
          continue;
        if (failed(splitOutputFeatures(linear, grid, axes, tp)))
          return signalPassFailure();
      }
    }
  }

  // linear(x, W) -> all_gather(linear(x, all_slice(W, dim 0)), dim 1).
  LogicalResult splitOutputFeatures(LinearOp linear, shard::GridOp grid,
                                    ArrayRef<shard::GridAxis> axes, int64_t tp) {
    auto result = llvm::cast<RankedTensorType>(linear.getResult().getType());
    int64_t features = result.getDimSize(1);
    if (features % tp != 0)
      return linear.emitOpError() << "TP " << tp << " does not divide the " << features
                                  << " output features of the pooler/unpooler";
    if (linear.getWeight().getDefiningOp<shard::AllSliceOp>())
      return success(); // already split
    OpBuilder b(linear);
    linear.getWeightMutable().assign(sharding::sliceAlong(b, linear.getWeight(), 0, grid, axes));
    linear.getResult().setType(sharding::withDimDividedBy(linear.getResult(), 1, tp));
    b.setInsertionPointAfter(linear);
    Value whole =
        sharding::allGather(b, linear.getLoc(), linear.getResult(), sharding::kTpGrid, axes, 1, tp);
    linear.getResult().replaceAllUsesExcept(whole, whole.getDefiningOp());
    ++numSplit;
    return success();
  }
};

} // namespace
} // namespace kiln
