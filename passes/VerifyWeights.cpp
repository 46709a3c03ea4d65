// kiln-verify-weights: module-level consistency of checkpoint references.
#include "passes/Passes.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringMap.h"

namespace kiln {

#define GEN_PASS_DEF_VERIFYWEIGHTS
#include "passes/Passes.h.inc"

namespace {

// The type one checkpoint tensor must have, and the op that first said so.
struct Claim {
  mlir::RankedTensorType type;
  WeightOp op;
};

mlir::LogicalResult claimName(llvm::StringMap<Claim> &claims, const std::string &name,
                              mlir::RankedTensorType type, WeightOp op) {
  auto [it, inserted] = claims.try_emplace(name, Claim{type, op});
  if (inserted || it->second.type == type)
    return mlir::success();
  mlir::InFlightDiagnostic diag = op.emitOpError()
                                  << "checkpoint tensor '" << name << "' is used as " << type
                                  << " here but as " << it->second.type << " elsewhere";
  diag.attachNote(it->second.op.getLoc()) << "first used here";
  return diag;
}

// ModelOpt names the three parts of an NVFP4 weight X as X.weight,
// X.weight_scale and X.weight_scale_2.
mlir::LogicalResult checkNvfp4Names(Nvfp4DequantOp dequant) {
  auto packed = dequant.getPacked().getDefiningOp<WeightOp>();
  auto scales = dequant.getScales().getDefiningOp<WeightOp>();
  auto global = dequant.getGlobal().getDefiningOp<WeightOp>();
  if (!packed || !scales || !global)
    return mlir::success(); // not read straight from the checkpoint
  llvm::StringRef name = packed.getName();
  if (!name.consume_back(".weight"))
    return dequant.emitOpError() << "packed operand '" << packed.getName()
                                 << "' must be a checkpoint tensor named '<module>.weight'";
  std::string module = name.str();
  if (scales.getName() != module + ".weight_scale")
    return dequant.emitOpError() << "scales operand must be '" << module << ".weight_scale', got '"
                                 << scales.getName() << "'";
  if (global.getName() != module + ".weight_scale_2")
    return dequant.emitOpError() << "global operand must be '" << module
                                 << ".weight_scale_2', got '" << global.getName() << "'";
  return mlir::success();
}

struct VerifyWeights final : impl::VerifyWeightsBase<VerifyWeights> {
  void runOnOperation() override {
    llvm::StringMap<Claim> claims;
    bool failed = false;
    getOperation().walk([&](mlir::Operation *op) {
      if (auto weight = llvm::dyn_cast<WeightOp>(op)) {
        mlir::RankedTensorType type = weight.getResult().getType();
        if (!weight.isExpertStack()) {
          failed |= mlir::failed(claimName(claims, weight.getName().str(), type, weight));
          return;
        }
        auto one = mlir::RankedTensorType::get(type.getShape().drop_front(), type.getElementType());
        for (int64_t e = 0, n = type.getDimSize(0); e < n && !failed; ++e)
          failed |= mlir::failed(claimName(claims, weight.expandedName(e), one, weight));
      } else if (auto dequant = llvm::dyn_cast<Nvfp4DequantOp>(op)) {
        failed |= mlir::failed(checkNvfp4Names(dequant));
      }
    });
    if (failed)
      signalPassFailure();
    markAllAnalysesPreserved();
  }
};

} // namespace
} // namespace kiln
