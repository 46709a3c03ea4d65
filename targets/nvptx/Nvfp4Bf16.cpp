#include "targets/nvptx/Nvfp4Bf16.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace kiln::nvptx {

using namespace mlir;

// A code s e1 e0 m placed as bf16 bits (s << 15 | e1 e0 m << 6) is its value
// times 2^-126 (e = 0: the bf16 subnormal), so two exact products finish it:
// by 2^126, then by the scale.
Value nvfp4BlockToBf16(ImplicitLocOpBuilder &b, Value words, Value scale) {
  Type i32 = b.getI32Type();
  auto c32 = [&](uint32_t v) { return arith::ConstantIntOp::create(b, i32, int64_t(v)); };
  SmallVector<Value> out;
  for (int64_t w = 0; w < 2; ++w) {
    Value word = vector::ExtractOp::create(b, words, ArrayRef<int64_t>{w});
    for (int64_t p = 0; p < 4; ++p) {
      // Codes 2p (low nibble) and 2p + 1 at bits 0-3 and 16-19 of y.
      Value byte = arith::AndIOp::create(
          b, p ? arith::ShRUIOp::create(b, word, c32(8 * p)).getResult() : word, c32(0xFF));
      Value y = arith::OrIOp::create(b, byte, arith::ShLIOp::create(b, byte, c32(12)));
      Value mags = arith::AndIOp::create(b, arith::ShLIOp::create(b, y, c32(6)), c32(0x01C001C0));
      Value signs = arith::AndIOp::create(b, arith::ShLIOp::create(b, y, c32(12)), c32(0x80008000));
      out.push_back(arith::OrIOp::create(b, mags, signs));
    }
  }
  auto bf16x16 = VectorType::get({16}, b.getBF16Type());
  Value bits = vector::FromElementsOp::create(b, VectorType::get({8}, i32), out);
  Value values = vector::BitCastOp::create(b, bf16x16, bits);
  Value unit = arith::ConstantOp::create(
      b, DenseElementsAttr::get(bf16x16, FloatAttr::get(b.getBF16Type(), 0x1p126)));
  values = arith::MulFOp::create(b, values, unit);
  // E4M3 s eeee mmm as f32 bits s << 31 | eeeemmm << 20 is its value times
  // 2^-120.
  Value sc = arith::ExtUIOp::create(b, i32, scale);
  Value sbits = arith::OrIOp::create(
      b, arith::ShLIOp::create(b, arith::AndIOp::create(b, sc, c32(0x80)), c32(24)),
      arith::ShLIOp::create(b, arith::AndIOp::create(b, sc, c32(0x7F)), c32(20)));
  Value sf =
      arith::MulFOp::create(b, arith::BitcastOp::create(b, b.getF32Type(), sbits),
                            arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(0x1p120f)));
  Value sb = arith::TruncFOp::create(b, b.getBF16Type(), sf);
  values = arith::MulFOp::create(b, values, vector::BroadcastOp::create(b, bf16x16, sb));
  return vector::BitCastOp::create(b, VectorType::get({8}, i32), values);
}

} // namespace kiln::nvptx
