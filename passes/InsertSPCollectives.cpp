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
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_INSERTSPCOLLECTIVES
#include "passes/Passes.h.inc"

namespace {

using sharding::kEpGrid;
using sharding::kTpGrid;

// Operands whose leading dimension is the token dimension, for ops that work
// token by token. Empty for ops that are not token-local.
SmallVector<OpOperand *> tokenOperands(Operation *op) {
  SmallVector<OpOperand *> operands;
  auto add = [&](OpOperand &o) { operands.push_back(&o); };
  llvm::TypeSwitch<Operation *>(op)
      .Case([&](RmsNormOp o) { add(o.getInputMutable()); })
      .Case<MulOp, AddOp>([&](auto o) {
        add(o.getLhsMutable());
        auto lhs = llvm::cast<RankedTensorType>(o.getLhs().getType());
        if (llvm::cast<RankedTensorType>(o.getRhs().getType()).getRank() == lhs.getRank())
          add(o.getRhsMutable());
      })
      .Case([&](LinearOp o) { add(o.getInputMutable()); })
      .Case([&](RouterTopKOp o) { add(o.getLogitsMutable()); })
      .Case([&](LocalExpertsOp o) { add(o.getIndicesMutable()); })
      .Case([&](ExpertSwiGLUOp o) {
        add(o.getInputMutable());
        add(o.getIndicesMutable());
      })
      .Case([&](ExpertNormOp o) {
        add(o.getInputMutable());
        add(o.getIndicesMutable());
      })
      .Case([&](CombineOp o) {
        add(o.getInputMutable());
        add(o.getWeightsMutable());
      })
      .Case([&](MegaMoEOp o) {
        add(o.getInputMutable());
        add(o.getIndicesMutable());
        add(o.getWeightsMutable());
      })
      .Case([&](NormResidualOp o) {
        add(o.getResidualMutable());
        add(o.getUpdateMutable());
      });
  return operands;
}

// Ops of the attention block that need every token: the QKV projections
// (their results are split into heads), the head-wise ops, attention and the
// o_proj (it reads merged heads), plus the output head.
bool needsAllTokens(Operation *op) {
  if (op->hasTrait<OpTrait::HeadWise>() || llvm::isa<AttentionOp, MergeHeadsOp, LogitsOp>(op))
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
      SmallVector<OpOperand *> tokens = tokenOperands(&op);
      if (tokens.empty() ||
          llvm::none_of(tokens, [&](OpOperand *o) { return sharded.contains(o->get()); }))
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
