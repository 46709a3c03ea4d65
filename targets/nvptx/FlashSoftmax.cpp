#include "targets/nvptx/FlashSoftmax.h"

#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx::flash {

using namespace mlir;

Value quadReduce(ImplicitLocOpBuilder &b, Value v, bool max) {
  return kernels::xorShuffleReduce(b, v, {1, 2}, [&](Value own, Value other) {
    return max ? arith::MaxNumFOp::create(b, own, other).getResult()
               : arith::AddFOp::create(b, own, other).getResult();
  });
}

Value packBf16(ImplicitLocOpBuilder &b, Value lo, Value hi) {
  auto v2 = VectorType::get({2}, b.getF32Type());
  Value pair = vector::FromElementsOp::create(b, v2, ValueRange{lo, hi});
  Value bf = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), pair);
  return LLVM::BitcastOp::create(b, b.getI32Type(), bf);
}

namespace {
// exp2 with subnormals flushed: ex2.approx.ftz.f32.
Value exp2Flushed(ImplicitLocOpBuilder &b, Value x) {
  return LLVM::CallIntrinsicOp::create(
             b, b.getF32Type(), b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"), ValueRange{x})
      .getResult(0);
}
} // namespace

SoftmaxStep softmaxStep(ImplicitLocOpBuilder &b, Value tileMaxA, Value tileMaxB, ValueRange carried,
                        MutableArrayRef<Value> p, Value minusInf, Value zero, Value rawScale) {
  auto exp2 = [&](Value x) {
    return rawScale ? exp2Flushed(b, x) : math::Exp2Op::create(b, x).getResult();
  };
  auto scaled = [&](Value rowMax) {
    return rawScale ? arith::MulFOp::create(b, rowMax, rawScale).getResult() : rowMax;
  };
  SoftmaxStep s;
  s.maxA = arith::MaxNumFOp::create(b, carried[0], scaled(quadReduce(b, tileMaxA, true)));
  s.maxB = arith::MaxNumFOp::create(b, carried[1], scaled(quadReduce(b, tileMaxB, true)));
  // A row that has seen no key yet keeps -inf: subtract 0 instead.
  auto base = [&](Value m) {
    Value none = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, m, minusInf);
    return arith::SelectOp::create(b, none, zero, m).getResult();
  };
  Value baseA = base(s.maxA), baseB = base(s.maxB);
  s.alphaA = exp2(arith::SubFOp::create(b, carried[0], baseA));
  s.alphaB = exp2(arith::SubFOp::create(b, carried[1], baseB));
  s.sumA = arith::MulFOp::create(b, carried[2], s.alphaA);
  s.sumB = arith::MulFOp::create(b, carried[3], s.alphaB);
  Value negA, negB;
  if (rawScale) {
    negA = arith::NegFOp::create(b, baseA);
    negB = arith::NegFOp::create(b, baseB);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    bool rowIsA = (i % 4) < 2;
    Value exponent = rawScale
                         ? math::FmaOp::create(b, p[i], rawScale, rowIsA ? negA : negB).getResult()
                         : arith::SubFOp::create(b, p[i], rowIsA ? baseA : baseB).getResult();
    p[i] = exp2(exponent);
    if (rowIsA)
      s.sumA = arith::AddFOp::create(b, s.sumA, p[i]);
    else
      s.sumB = arith::AddFOp::create(b, s.sumB, p[i]);
  }
  return s;
}

} // namespace kiln::nvptx::flash
