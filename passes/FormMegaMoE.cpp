// kiln-form-megamoe: the expert stage (dispatch, gate/up GEMM, SwiGLU, down
// GEMM, per-expert RMSNorm, weighted combine, and under EP the exchange
// between ranks) becomes one kiln.megamoe op: the unit the MegaMoE
// megakernel implements.
#include "passes/Passes.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_FORMMEGAMOE
#include "passes/Passes.h.inc"

namespace {

template <typename OpT> OpT soleUser(Value v) {
  return v.hasOneUse() ? llvm::dyn_cast<OpT>(*v.user_begin()) : OpT();
}

struct FormMegaMoE final : impl::FormMegaMoEBase<FormMegaMoE> {
  void runOnOperation() override {
    SmallVector<ExpertSwiGLUOp> stages;
    getOperation().walk([&](ExpertSwiGLUOp op) { stages.push_back(op); });
    for (ExpertSwiGLUOp swiglu : stages)
      form(swiglu);
  }

  void form(ExpertSwiGLUOp swiglu) {
    auto norm = soleUser<ExpertNormOp>(swiglu.getResult());
    auto combine = norm ? soleUser<CombineOp>(norm.getResult()) : CombineOp();
    if (!combine || norm.getIndices() != swiglu.getIndices())
      return; // not the model's chain: leave it
    Value indices = swiglu.getIndices();
    int64_t numExperts = llvm::cast<RankedTensorType>(swiglu.getGate().getType()).getDimSize(0);
    FlatSymbolRefAttr grid;
    DenseI16ArrayAttr axes;
    Operation *last = combine;
    // Expert parallelism: local numbering in, a sum over the expert group out.
    if (auto local = indices.getDefiningOp<LocalExpertsOp>()) {
      auto reduce = soleUser<shard::AllReduceOp>(combine.getResult());
      if (!reduce || reduce.getGridAttr() != local.getGridAttr() ||
          reduce.getGridAxes() != local.getGridAxes() ||
          reduce.getReduction() != shard::ReductionKind::Sum)
        return;
      indices = local.getIndices();
      numExperts = local.getNumExperts();
      grid = local.getGridAttr();
      axes = local.getGridAxesAttr();
      last = reduce;
    }
    OpBuilder b(last);
    Location loc = b.getFusedLoc({swiglu.getLoc(), norm.getLoc(), combine.getLoc()});
    auto mega = MegaMoEOp::create(b, loc, combine.getResult().getType(), swiglu.getInput(), indices,
                                  combine.getWeights(), swiglu.getGate(), swiglu.getUp(),
                                  swiglu.getDown(), norm.getWeight(), norm.getEpsAttr(),
                                  b.getI64IntegerAttr(numExperts), grid, axes);
    last->getResult(0).replaceAllUsesWith(mega.getResult());
    Operation *local = swiglu.getIndices().getDefiningOp<LocalExpertsOp>();
    // Users first. Without expert parallelism `last` is the combine itself:
    // listing it twice would erase it twice.
    SmallVector<Operation *, 4> chain;
    if (last != combine.getOperation())
      chain.push_back(last);
    chain.append({combine.getOperation(), norm.getOperation(), swiglu.getOperation()});
    for (Operation *dead : chain)
      if (dead->use_empty())
        dead->erase();
    if (local && local->use_empty())
      local->erase();
    ++numFormed;
  }
};

} // namespace
} // namespace kiln
