// kiln-shard: tensor parallelism for attention, expert parallelism for the
// MoE, as one SPMD program over max(TP, EP) devices.
#include "passes/Passes.h"
#include "passes/Sharding.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_SHARD
#include "passes/Passes.h.inc"

namespace {

using sharding::kEpGrid;
using sharding::kTpGrid;

// The projection that feeds an attention operand, and the per-head ops
// between them (split_heads, head_norm, rope), in program order.
struct HeadChain {
  LinearOp projection;
  SmallVector<Operation *> perHead;
};

FailureOr<HeadChain> chainFeeding(AttentionOp attention, Value operand) {
  HeadChain chain;
  Value v = operand;
  while (Operation *def = v.getDefiningOp()) {
    if (auto linear = llvm::dyn_cast<LinearOp>(def)) {
      chain.projection = linear;
      std::reverse(chain.perHead.begin(), chain.perHead.end());
      return chain;
    }
    if (!def->hasTrait<OpTrait::HeadWise>() || !def->hasOneUse())
      break;
    chain.perHead.push_back(def);
    v = def->getOperand(0);
  }
  return attention.emitOpError()
         << "kiln-shard expects each attention operand to come from a kiln.linear through "
            "head-wise ops only (split_heads, head_norm, rope, ...)";
}

// Re-derives the result types of a head chain after its projection was
// narrowed: split_heads keeps head_dim, the others keep their input's type.
void retypeChain(const HeadChain &chain) {
  for (Operation *op : chain.perHead) {
    auto in = llvm::cast<RankedTensorType>(op->getOperand(0).getType());
    auto out = llvm::cast<RankedTensorType>(op->getResult(0).getType());
    if (llvm::isa<SplitHeadsOp>(op)) {
      int64_t headDim = out.getDimSize(2);
      op->getResult(0).setType(RankedTensorType::get(
          {in.getDimSize(0), in.getDimSize(1) / headDim, headDim}, out.getElementType()));
    } else {
      op->getResult(0).setType(in);
    }
  }
}

struct Shard final : impl::ShardBase<Shard> {
  using ShardBase::ShardBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    int64_t tp = this->tp, ep = this->ep;
    if (tp < 1 || ep < 1) {
      module.emitError() << "kiln-shard: tp and ep must be at least 1, got tp=" << tp
                         << " ep=" << ep;
      return signalPassFailure();
    }
    int64_t world = std::max(tp, ep);
    if (world % tp != 0 || world % ep != 0) {
      module.emitError() << "kiln-shard: TP (" << tp << ") and EP (" << ep
                         << ") share max(TP, EP) devices, so one must divide the other";
      return signalPassFailure();
    }
    if (world == 1)
      return markAllAnalysesPreserved();
    module->setAttr(kLayoutAttrName, LayoutAttr::get(&getContext(), tp, ep, /*sp=*/false));

    tpRanks = tp;
    epRanks = ep;
    WalkResult result = module.walk([&](func::FuncOp func) -> WalkResult {
      if (tp > 1)
        for (AttentionOp attention : llvm::to_vector(func.getOps<AttentionOp>()))
          if (failed(shardAttention(module, attention, world)))
            return WalkResult::interrupt();
      if (tp > 1)
        for (LogitsOp logits : llvm::to_vector(func.getOps<LogitsOp>()))
          shardHead(module, logits);
      if (ep > 1)
        for (ExpertSwiGLUOp experts : llvm::to_vector(func.getOps<ExpertSwiGLUOp>()))
          if (failed(shardExperts(module, experts, world)))
            return WalkResult::interrupt();
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }

  int64_t tpRanks = 1, epRanks = 1;

  LogicalResult shardAttention(ModuleOp module, AttentionOp attention, int64_t world) {
    int64_t tp = tpRanks;
    auto q = llvm::cast<RankedTensorType>(attention.getQ().getType());
    auto k = llvm::cast<RankedTensorType>(attention.getK().getType());
    int64_t qHeads = q.getDimSize(1), kvHeads = k.getDimSize(1);
    if (qHeads % tp != 0)
      return attention.emitOpError()
             << "TP " << tp << " does not divide the " << qHeads << " query heads";
    if (tp <= kvHeads ? kvHeads % tp != 0 : tp % kvHeads != 0)
      return attention.emitOpError() << "TP " << tp << " must divide the " << kvHeads
                                     << " KV heads or be a multiple of them";
    // Ranks that share one KV head when TP exceeds the KV heads.
    int64_t replicas = tp <= kvHeads ? 1 : tp / kvHeads;
    shard::GridOp grid =
        sharding::getOrCreateGrid(module, kTpGrid, {world / tp, tp / replicas, replicas});
    SmallVector<shard::GridAxis> allRanks = {1, 2}, kvRanks = {1};

    FailureOr<HeadChain> qChain = chainFeeding(attention, attention.getQ());
    FailureOr<HeadChain> kChain = chainFeeding(attention, attention.getK());
    FailureOr<HeadChain> vChain = chainFeeding(attention, attention.getV());
    if (failed(qChain) || failed(kChain) || failed(vChain))
      return failure();
    auto merge = attention->hasOneUse()
                     ? llvm::dyn_cast<MergeHeadsOp>(*attention->getUsers().begin())
                     : MergeHeadsOp();
    auto oProj = merge && merge->hasOneUse() ? llvm::dyn_cast<LinearOp>(*merge->getUsers().begin())
                                             : LinearOp();
    if (!oProj)
      return attention.emitOpError()
             << "kiln-shard expects the attention output to reach a kiln.linear through "
                "merge_heads";

    OpBuilder b(&getContext());
    auto columnParallel = [&](const HeadChain &chain, ArrayRef<shard::GridAxis> axes) {
      LinearOp proj = chain.projection;
      b.setInsertionPoint(proj);
      Value w = sharding::sliceAlong(b, proj.getWeight(), 0, grid, axes);
      proj.getWeightMutable().assign(w);
      auto out = llvm::cast<RankedTensorType>(proj.getResult().getType());
      proj.getResult().setType(RankedTensorType::get(
          {out.getDimSize(0), llvm::cast<RankedTensorType>(w.getType()).getDimSize(0)},
          out.getElementType()));
      retypeChain(chain);
      ++numSlicedTensors;
    };
    columnParallel(*qChain, allRanks);
    columnParallel(*kChain, kvRanks);
    columnParallel(*vChain, kvRanks);

    auto qLocal = llvm::cast<RankedTensorType>(attention.getQ().getType());
    auto vLocal = llvm::cast<RankedTensorType>(attention.getV().getType());
    attention.getResult().setType(
        RankedTensorType::get({qLocal.getDimSize(0), qLocal.getDimSize(1), vLocal.getDimSize(2)},
                              qLocal.getElementType()));
    auto merged = llvm::cast<RankedTensorType>(merge.getResult().getType());
    merge.getResult().setType(
        RankedTensorType::get({merged.getDimSize(0), qLocal.getDimSize(1) * vLocal.getDimSize(2)},
                              merged.getElementType()));

    // Row-parallel o_proj: each rank's partial sum, then the all-reduce.
    b.setInsertionPoint(oProj);
    oProj.getWeightMutable().assign(sharding::sliceAlong(b, oProj.getWeight(), 1, grid, allRanks));
    ++numSlicedTensors;
    b.setInsertionPointAfter(oProj);
    Value reduced = sharding::allReduce(b, oProj.getLoc(), oProj.getResult(), kTpGrid, allRanks);
    oProj.getResult().replaceAllUsesExcept(reduced, reduced.getDefiningOp());
    ++numCollectives;
    return success();
  }

  // Vocabulary-parallel output head: each TP rank computes the logits of
  // its share of the vocabulary, and the all-gather puts the rows together.
  // A vocabulary TP does not divide stays replicated.
  void shardHead(ModuleOp module, LogitsOp logits) {
    auto head = llvm::cast<RankedTensorType>(logits.getHead().getType());
    auto grid = module.lookupSymbol<shard::GridOp>(kTpGrid);
    if (!grid || head.getDimSize(0) % tpRanks != 0)
      return;
    SmallVector<shard::GridAxis> allRanks = {1, 2};
    OpBuilder b(logits);
    logits.getHeadMutable().assign(sharding::sliceAlong(b, logits.getHead(), 0, grid, allRanks));
    ++numSlicedTensors;
    auto out = llvm::cast<RankedTensorType>(logits.getResult().getType());
    logits.getResult().setType(RankedTensorType::get(
        {out.getDimSize(0), out.getDimSize(1) / tpRanks}, out.getElementType()));
    b.setInsertionPointAfter(logits);
    Value gathered =
        sharding::allGather(b, logits.getLoc(), logits.getResult(), kTpGrid, allRanks, 1, tpRanks);
    logits.getResult().replaceAllUsesExcept(gathered, gathered.getDefiningOp());
    ++numCollectives;
  }

  LogicalResult shardExperts(ModuleOp module, ExpertSwiGLUOp experts, int64_t world) {
    int64_t ep = epRanks;
    auto gate = llvm::cast<RankedTensorType>(experts.getGate().getType());
    int64_t numExperts = gate.getDimSize(0);
    if (numExperts % ep != 0)
      return experts.emitOpError()
             << "EP " << ep << " does not divide the " << numExperts << " experts";
    auto norm = experts->hasOneUse() ? llvm::dyn_cast<ExpertNormOp>(*experts->getUsers().begin())
                                     : ExpertNormOp();
    auto combine = norm && norm->hasOneUse() ? llvm::dyn_cast<CombineOp>(*norm->getUsers().begin())
                                             : CombineOp();
    if (!combine || norm.getIndices() != experts.getIndices())
      return experts.emitOpError() << "kiln-shard expects expert_swiglu -> expert_norm -> "
                                      "combine on the same expert choices";
    shard::GridOp grid = sharding::getOrCreateGrid(module, kEpGrid, {world / ep, ep});
    SmallVector<shard::GridAxis> axes = {1};

    OpBuilder b(experts);
    Value local =
        LocalExpertsOp::create(b, experts.getLoc(), experts.getIndices().getType(),
                               experts.getIndices(), FlatSymbolRefAttr::get(grid.getSymNameAttr()),
                               b.getDenseI16ArrayAttr(axes), b.getI64IntegerAttr(numExperts));
    experts.getIndicesMutable().assign(local);
    norm.getIndicesMutable().assign(local);
    for (OpOperand *stack : {&experts.getGateMutable(), &experts.getUpMutable(),
                             &experts.getDownMutable(), &norm.getWeightMutable()}) {
      b.setInsertionPoint(stack->getOwner());
      stack->set(sharding::sliceAlong(b, stack->get(), 0, grid, axes));
      ++numSlicedTensors;
    }
    // Each rank combined its own experts' outputs; the sum over the group
    // completes every token.
    b.setInsertionPointAfter(combine);
    Value reduced = sharding::allReduce(b, combine.getLoc(), combine.getResult(), kEpGrid, axes);
    combine.getResult().replaceAllUsesExcept(reduced, reduced.getDefiningOp());
    ++numCollectives;
    return success();
  }
};

} // namespace
} // namespace kiln
