#include "targets/nvptx/Nvfp4Bf16.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace kiln::nvptx {

using namespace mlir;

// About four instructions a pair of codes (the wgmma expert producer's inner
// loop in prefill):
//   - a byte permute puts codes 2p and 2p + 1 (the nibbles of byte p, split
//     beforehand into the even and odd codes' bytes) at bits 0-3 and 16-19;
//   - y * (2^6 + 2^12), the two shifted copies not overlapping, then one
//     mask leave each code s e1 e0 m as the bf16 bits s << 15 | e1 e0 m << 6:
//     its value times 2^-126 (e = 0 being the bf16 subnormal);
//   - one bf16x2 multiply by the scale times 2^119 (at most 448 * 2^119,
//     within bf16) gives code * scale * 2^-7.
Value nvfp4BlockToBf16(ImplicitLocOpBuilder &b, Value words, Value scale) {
  Type i32 = b.getI32Type();
  auto c32 = [&](uint32_t v) { return arith::ConstantIntOp::create(b, i32, int64_t(v)); };
  SmallVector<Value> out;
  for (int64_t w = 0; w < 2; ++w) {
    Value word = vector::ExtractOp::create(b, words, ArrayRef<int64_t>{w});
    Value even = arith::AndIOp::create(b, word, c32(0x0F0F0F0F));
    Value odd = arith::AndIOp::create(b, arith::ShRUIOp::create(b, word, c32(4)), c32(0x0F0F0F0F));
    for (uint32_t p = 0; p < 4; ++p) {
      // Result bytes: even byte p, zero, odd byte p, zero. A selector nibble
      // with its top bit set repeats the sign of the byte it names, and
      // these bytes are at most 0x0F.
      const uint32_t zero = 8 | p;
      const uint32_t selector = p | zero << 4 | (4 + p) << 8 | zero << 12;
      Value y =
          NVVM::PermuteOp::create(b, i32, even, odd, c32(selector), NVVM::PermuteMode::DEFAULT);
      Value spread = arith::MulIOp::create(b, y, c32((1u << 6) + (1u << 12)));
      out.push_back(arith::AndIOp::create(b, spread, c32(0x81C081C0)));
    }
  }
  auto bf16x16 = VectorType::get({16}, b.getBF16Type());
  Value bits = vector::FromElementsOp::create(b, VectorType::get({8}, i32), out);
  Value values = vector::BitCastOp::create(b, bf16x16, bits);
  // E4M3 s eeee mmm as f32 bits s << 31 | eeeemmm << 20 is its value times
  // 2^-120; two exact products make it the value times 2^119 (the scale's
  // subnormals included, which an exponent add would get wrong).
  Value sc = arith::ExtUIOp::create(b, i32, scale);
  Value sbits = arith::OrIOp::create(
      b, arith::ShLIOp::create(b, arith::AndIOp::create(b, sc, c32(0x80)), c32(24)),
      arith::ShLIOp::create(b, arith::AndIOp::create(b, sc, c32(0x7F)), c32(20)));
  FloatType f32 = b.getF32Type();
  Value sf = arith::MulFOp::create(b, arith::BitcastOp::create(b, f32, sbits),
                                   arith::ConstantFloatOp::create(b, f32, APFloat(0x1p120f)));
  sf = arith::MulFOp::create(b, sf, arith::ConstantFloatOp::create(b, f32, APFloat(0x1p119f)));
  Value sb = arith::TruncFOp::create(b, b.getBF16Type(), sf);
  values = arith::MulFOp::create(b, values, vector::BroadcastOp::create(b, bf16x16, sb));
  return vector::BitCastOp::create(b, VectorType::get({8}, i32), values);
}

Value decodedGlobalScale(ImplicitLocOpBuilder &b, Value globals, Value expert) {
  Value g = memref::LoadOp::create(b, globals, ValueRange{expert});
  return arith::MulFOp::create(b, g,
                               arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(0x1p7f)));
}

} // namespace kiln::nvptx
