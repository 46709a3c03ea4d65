// kiln-insert-sp-collectives: sequence parallelism over the TP group. The
// all-reduce after o_proj becomes a reduce-scatter over tokens; everything
// that works token by token (norms, gates, residual adds, router, pooler,
// experts, unpooler) then runs on each rank's token shard; attention gets the
// whole sequence back through an all-gather before the QKV projections.
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_INSERTSPCOLLECTIVES
#include "passes/Passes.h.inc"

namespace {

using sharding::kEpGrid;
using sharding::kTpGrid;

// Ops of the attention block that need every token: those that declare it
// (attention, the merge of its heads, the output head), the head-wise ops
// between a QKV projection and attention, and the projections on either side
// of them, QKV (its results are split into heads) and o_proj (it reads merged
// heads), which are token-wise ops that only their place makes whole-sequence.
bool needsAllTokens(Operation *op) {
  if (op->hasTrait<OpTrait::HeadWise>() || op->hasTrait<OpTrait::WholeSequence>())
    return true;
  if (auto linear = llvm::dyn_cast<LinearOp>(op))
    return linear.getInput().getDefiningOp<MergeHeadsOp>() ||
           llvm::any_of(linear->getUsers(),
                        [](Operation *u) { return llvm::isa<SplitHeadsOp>(u); });
  return false;
}

struct InsertSPCollectives final : impl::InsertSPCollectivesBase<InsertSPCollectives> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto grid = module.lookupSymbol<shard::GridOp>(kTpGrid);
    if (!grid) {
      module.emitError() << "kiln-insert-sp-collectives splits tokens over the TP group: run "
                            "kiln-shard with tp > 1 first";
      return signalPassFailure();
    }
    int64_t tp = grid.getShape()[1] * grid.getShape()[2];
    for (func::FuncOp func : llvm::to_vector(module.getOps<func::FuncOp>()))
      if (failed(runOnFunction(func, grid, tp)))
        return signalPassFailure();
    if (LayoutAttr layout = graphLayout(module))
      module->setAttr(kLayoutAttrName,
                      LayoutAttr::get(&getContext(), layout.getTp(), layout.getEp(), /*sp=*/true));
  }

  LogicalResult checkPreconditions(func::FuncOp func, int64_t tp) {
    WalkResult walk =
        func.walk([&](Operation *op) -> WalkResult {
          // (The vocabulary-parallel head's gather of logits is not one.)
          if (auto gather = llvm::dyn_cast<shard::AllGatherOp>(op);
              gather && gather.getGrid() == kTpGrid && gather.getGatherAxis() == 1 &&
              !gather.getInput().getDefiningOp<LogitsOp>())
            return op->emitOpError()
                   << "splits features over the TP group (kiln-shard-pooler); under sequence "
                      "parallelism the pooler and unpooler run on each rank's token shard instead";
          if (auto reduce = llvm::dyn_cast<shard::AllReduceOp>(op);
              reduce && reduce.getGrid() == kEpGrid)
            return op->emitOpError() << "sums an expert-parallel stage whose tokens would differ "
                                        "between ranks under SP: run kiln-form-megamoe first, so "
                                        "the dispatch reaches every rank's tokens";
          // A dynamic token count is the caller's to split evenly (a target's
          // sequence-parallel entry takes whole multiples of TP).
          if (auto attention = llvm::dyn_cast<AttentionOp>(op)) {
            int64_t tokens = llvm::cast<RankedTensorType>(attention.getQ().getType()).getDimSize(0);
            if (!ShapedType::isDynamic(tokens) && tokens % tp != 0)
              return attention.emitOpError() << "sequence parallelism over " << tp
                                             << " ranks needs a static token count divisible by "
                                             << tp << ", got " << tokens;
          }
          return WalkResult::advance();
        });
    return failure(walk.wasInterrupted());
  }

  LogicalResult runOnFunction(func::FuncOp func, shard::GridOp grid, int64_t tp) {
    if (failed(checkPreconditions(func, tp)))
      return failure();
    SmallVector<shard::GridAxis> axes = {1, 2};
    llvm::DenseSet<Value> sharded;
    llvm::DenseMap<Value, Value> gathered, sliced; // one collective per value
    OpBuilder b(&getContext());

    auto gather = [&](Value v, Operation *before) -> Value {
      Value &g = gathered[v];
      if (!g) {
        b.setInsertionPointAfterValue(v);
        g = sharding::allGather(b, v.getLoc(), v, kTpGrid, axes, 0, tp);
        ++numGathers;
      }
      (void)before;
      return g;
    };
    auto slice = [&](Value v) -> Value {
      Value &s = sliced[v];
      if (!s) {
        b.setInsertionPointAfterValue(v);
        s = shard::AllSliceOp::create(b, v.getLoc(), sharding::withDimDividedBy(v, 0, tp), kTpGrid,
                                      axes, v, llvm::APInt(64, 0));
        sharded.insert(s);
      }
      return s;
    };

    for (Operation &op : llvm::make_early_inc_range(func.getBody().front())) {
      // The o_proj all-reduce becomes a reduce-scatter over tokens.
      if (auto reduce = llvm::dyn_cast<shard::AllReduceOp>(op);
          reduce && reduce.getGrid() == kTpGrid) {
        b.setInsertionPoint(reduce);
        Value scattered =
            sharding::reduceScatter(b, reduce.getLoc(), reduce.getInput(), kTpGrid, axes, 0, tp);
        reduce.getResult().replaceAllUsesWith(scattered);
        reduce.erase();
        sharded.insert(scattered);
        ++numScatters;
        continue;
      }
      if (needsAllTokens(&op) || llvm::isa<func::ReturnOp>(op)) {
        for (OpOperand &operand : op.getOpOperands())
          if (sharded.contains(operand.get()))
            operand.set(gather(operand.get(), &op));
        continue;
      }
      const bool takesShard =
          llvm::any_of(op.getOpOperands(), [&](OpOperand &o) { return sharded.contains(o.get()); });
      auto tokenWise = llvm::dyn_cast<TokenWiseOp>(&op);
      if (!tokenWise) {
        // An op of no declared kind would silently compute on a shard as if
        // it were the sequence.
        if (takesShard)
          return op.emitOpError()
                 << "takes a token-sharded operand but declares neither TokenWiseOp (it "
                    "works token by token) nor WholeSequence (it needs every token): "
                    "kiln-insert-sp-collectives cannot place it (KilnInterfaces.td)";
        continue;
      }
      SmallVector<OpOperand *> tokens = tokenWise.getTokenOperands();
      if (llvm::none_of(tokens, [&](OpOperand *o) { return sharded.contains(o->get()); }))
        continue;
      for (OpOperand *operand : tokens)
        if (!sharded.contains(operand->get()))
          operand->set(slice(operand->get()));
      for (Value result : op.getResults()) {
        result.setType(sharding::withDimDividedBy(result, 0, tp));
        sharded.insert(result);
      }
    }
    return success();
  }
};

} // namespace
} // namespace kiln
