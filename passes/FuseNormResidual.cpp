// kiln-fuse-norm-residual: the sandwich-norm boundary of Muse Spark (post
// norm, gated residual add, next norm) as one kiln.norm_residual.
#include "passes/Passes.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Dominance.h"

#include <optional>

using namespace mlir;

namespace kiln {

#define GEN_PASS_DEF_FUSENORMRESIDUAL
#include "passes/Passes.h.inc"

namespace {

// residual + gate * RMSNorm(update; post), then RMSNorm(...; next): the four
// ops of one chain, all in one block.
struct Chain {
  RmsNormOp postNorm;
  MulOp gating;
  AddOp add;
  RmsNormOp nextNorm;
  Value residual;
};

bool widthsAgree(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

// What kiln.norm_residual's verifier needs: residual and update of one
// rank-2 type, and the post weight, gate and next weight vectors of its width.
bool fitsNormResidual(Value residual, Value update, ArrayRef<Value> vectors) {
  auto type = llvm::dyn_cast<RankedTensorType>(residual.getType());
  if (!type || type.getRank() != 2 || update.getType() != type)
    return false;
  return llvm::all_of(vectors, [&](Value v) {
    auto vector = llvm::dyn_cast<RankedTensorType>(v.getType());
    return vector && vector.getRank() == 1 && widthsAgree(vector.getDimSize(0), type.getDimSize(1));
  });
}

// The first kiln.rms_norm of `h` in `block` order; null if there is none.
RmsNormOp firstNormOf(Value h, Block *block) {
  RmsNormOp first;
  for (Operation *user : h.getUsers()) {
    auto norm = llvm::dyn_cast<RmsNormOp>(user);
    if (!norm || norm.getInput() != h || user->getBlock() != block)
      continue;
    if (!first || user->isBeforeInBlock(first))
      first = norm;
  }
  return first;
}

// The chain ending in `add`, reading its operand `gatedOperand` as the gated
// norm and the other one as the residual.
std::optional<Chain> matchChain(AddOp add, unsigned gatedOperand) {
  Block *block = add->getBlock();
  Value gated = add->getOperand(gatedOperand);
  Value residual = add->getOperand(1 - gatedOperand);
  auto gating = gated.getDefiningOp<MulOp>();
  if (!gating || !gated.hasOneUse() || gating->getBlock() != block)
    return std::nullopt;
  Value normed = gating.getLhs();
  auto postNorm = normed.getDefiningOp<RmsNormOp>();
  if (!postNorm || !normed.hasOneUse() || postNorm->getBlock() != block)
    return std::nullopt;
  RmsNormOp nextNorm = firstNormOf(add.getResult(), block);
  if (!nextNorm)
    return std::nullopt;
  // A [tokens, hidden] multiplier is not a per-channel gate: the fused op has
  // no room for it, and fitsNormResidual turns it down with the rank check.
  if (!fitsNormResidual(residual, postNorm.getInput(),
                        {postNorm.getWeight(), gating.getRhs(), nextNorm.getWeight()}))
    return std::nullopt;
  return Chain{postNorm, gating, add, nextNorm, residual};
}

// Where the fused op may go. At the next norm, where all of its operands
// exist, unless another reader of the add's result comes before that norm;
// then at the add, if the next norm's weight is defined by then.
Operation *insertionPoint(Chain chain, DominanceInfo &dominance) {
  Operation *next = chain.nextNorm;
  bool othersAfterNext = llvm::all_of(chain.add->getUsers(), [&](Operation *user) {
    return user == next || dominance.properlyDominates(next, user);
  });
  if (othersAfterNext)
    return next;
  if (dominance.properlyDominates(chain.nextNorm.getWeight(), chain.add))
    return chain.add;
  return nullptr;
}

void fuse(Chain chain, Operation *at) {
  MLIRContext *context = at->getContext();
  Location loc = FusedLoc::get(context, {chain.postNorm.getLoc(), chain.gating.getLoc(),
                                         chain.add.getLoc(), chain.nextNorm.getLoc()});
  OpBuilder b(at);
  Type type = chain.residual.getType();
  auto fused = NormResidualOp::create(b, loc, type, type, chain.residual, chain.postNorm.getInput(),
                                      chain.postNorm.getWeight(), chain.gating.getRhs(),
                                      chain.nextNorm.getWeight(), chain.postNorm.getEpsAttr(),
                                      chain.nextNorm.getEpsAttr());
  // Users first, producers last: each op is unused when it goes.
  chain.nextNorm.getResult().replaceAllUsesWith(fused.getNormed());
  chain.nextNorm.erase();
  chain.add.getResult().replaceAllUsesWith(fused.getNewResidual());
  chain.add.erase();
  chain.gating.erase();
  chain.postNorm.erase();
}

struct FuseNormResidual final : impl::FuseNormResidualBase<FuseNormResidual> {
  using FuseNormResidualBase::FuseNormResidualBase;

  void runOnOperation() override {
    // Fusing inserts and erases ops but never blocks, so the dominance
    // information stays valid throughout.
    DominanceInfo &dominance = getAnalysis<DominanceInfo>();
    // Program order makes overlapping chains resolve the same way every run.
    // Fusing a chain erases only its own add, so the list stays valid.
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp add) { adds.push_back(add); });

    int64_t fused = 0;
    for (AddOp add : adds) {
      // The model adds residual + gated; try that reading before the other.
      for (unsigned gatedOperand : {1u, 0u}) {
        std::optional<Chain> chain = matchChain(add, gatedOperand);
        Operation *at = chain ? insertionPoint(*chain, dominance) : nullptr;
        if (!at)
          continue;
        fuse(*chain, at);
        ++fused;
        break;
      }
    }
    numFused += fused;
    if (fused == 0)
      markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace kiln
