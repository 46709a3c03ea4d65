#include "targets/common/KvCacheAccess.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/TypeUtilities.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/bit.h"

namespace kiln::kernels {

using namespace mlir;

int64_t kvElementBytes(KvElement element) {
  return element == KvElement::FP8 ? 1 : element == KvElement::BF16 ? 2 : 4;
}

const char *kvElementName(KvElement element) {
  return element == KvElement::FP8 ? "fp8" : element == KvElement::BF16 ? "bf16" : "f32";
}

std::string kvSuffix(const AttentionShape &shape) {
  switch (shape.cache) {
  case KvElement::F32:
    return "";
  case KvElement::BF16:
    return "_kvbf16";
  case KvElement::FP8:
    break;
  }
  if (shape.keyScale == 1 && shape.valueScale == 1)
    return "_kvf8";
  auto bits = [](double scale) {
    return llvm::utohexstr(llvm::bit_cast<uint32_t>(static_cast<float>(scale)), /*LowerCase=*/true,
                           8);
  };
  return "_kvf8_" + bits(shape.keyScale) + "_" + bits(shape.valueScale);
}

Type kvElementType(Builder &b, KvElement element) {
  switch (element) {
  case KvElement::F32:
    return b.getF32Type();
  case KvElement::BF16:
    return b.getBF16Type();
  case KvElement::FP8:
    break;
  }
  return b.getI8Type();
}

namespace {
// `type` (f32 or a vector of it) with `element` in place of f32.
Type withElement(Type type, Type element) {
  if (auto vector = llvm::dyn_cast<VectorType>(type))
    return VectorType::get(vector.getShape(), element);
  return element;
}
llvm::MaybeAlign alignment(int64_t bytes) {
  return bytes ? llvm::MaybeAlign(bytes) : llvm::MaybeAlign();
}
// A constant of `type` (a scalar or a vector of it) with every element `v`.
Value splat(ImplicitLocOpBuilder &b, Type type, int64_t v) {
  Type element = mlir::getElementTypeOrSelf(type);
  if (auto vector = llvm::dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, vector,
                                     DenseElementsAttr::get(vector, b.getIntegerAttr(element, v)));
  return arith::ConstantOp::create(b, b.getIntegerAttr(element, v));
}
Value splatF(ImplicitLocOpBuilder &b, Type type, float v) {
  if (auto vector = llvm::dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, vector, DenseElementsAttr::get(vector, v));
  return arith::ConstantOp::create(b, b.getF32FloatAttr(v));
}
// value / scale and value * scale, nothing for a scale of 1.
Value unscaled(ImplicitLocOpBuilder &b, Value value, double scale) {
  if (scale == 1)
    return value;
  return arith::DivFOp::create(b, value, splatF(b, value.getType(), static_cast<float>(scale)));
}
Value scaled(ImplicitLocOpBuilder &b, Value value, double scale) {
  if (scale == 1)
    return value;
  return arith::MulFOp::create(b, value, splatF(b, value.getType(), static_cast<float>(scale)));
}
} // namespace

Value decodeE4m3(ImplicitLocOpBuilder &b, Value codes) {
  Type i32 = withElement(codes.getType(), b.getI32Type());
  Type f32 = withElement(codes.getType(), b.getF32Type());
  Value c = arith::ExtUIOp::create(b, i32, codes);
  Value sign =
      arith::ShLIOp::create(b, arith::AndIOp::create(b, c, splat(b, i32, 0x80)), splat(b, i32, 24));
  Value magnitude = arith::AndIOp::create(b, c, splat(b, i32, 0x7f));
  // Normal codes: the f32 with exponent e - 7 + 127 and the three mantissa
  // bits on top of its mantissa.
  Value normal = arith::AddIOp::create(b, arith::ShLIOp::create(b, magnitude, splat(b, i32, 20)),
                                       splat(b, i32, 120 << 23));
  // Subnormal codes (exponent field 0): m * 2^-9.
  Value subnormal =
      arith::BitcastOp::create(b, i32,
                               arith::MulFOp::create(b, arith::UIToFPOp::create(b, f32, magnitude),
                                                     splatF(b, f32, 1.0f / 512)));
  Value isSubnormal =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ult, magnitude, splat(b, i32, 8));
  Value isNan = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, magnitude, splat(b, i32, 0x7f));
  Value bits = arith::SelectOp::create(b, isSubnormal, subnormal, normal);
  bits = arith::SelectOp::create(b, isNan, splat(b, i32, 0x7fc00000), bits);
  return arith::BitcastOp::create(b, f32, arith::OrIOp::create(b, bits, sign));
}

Value encodeE4m3(ImplicitLocOpBuilder &b, Value values) {
  Type i32 = withElement(values.getType(), b.getI32Type());
  Type f32 = values.getType();
  Value bits = arith::BitcastOp::create(b, i32, values);
  Value sign = arith::AndIOp::create(b, arith::ShRUIOp::create(b, bits, splat(b, i32, 24)),
                                     splat(b, i32, 0x80));
  // |x| as bits: ordered as the magnitudes are, so saturation at 448
  // (0x43e00000) is an integer minimum; NaNs are above infinity's bits.
  Value magnitude = arith::AndIOp::create(b, bits, splat(b, i32, 0x7fffffff));
  Value isNan =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, magnitude, splat(b, i32, 0x7f800000));
  Value a = arith::MinUIOp::create(b, magnitude, splat(b, i32, 0x43e00000));
  // Normal results (|x| >= 2^-6): round the f32 mantissa to three bits, to
  // nearest even, and rebias the exponent (127 to 7); a carry moves into the
  // exponent as it should.
  Value odd =
      arith::AndIOp::create(b, arith::ShRUIOp::create(b, a, splat(b, i32, 20)), splat(b, i32, 1));
  Value rounded =
      arith::AddIOp::create(b, arith::AddIOp::create(b, a, splat(b, i32, 0x7ffff)), odd);
  Value normal = arith::SubIOp::create(b, arith::ShRUIOp::create(b, rounded, splat(b, i32, 20)),
                                       splat(b, i32, 120 << 3));
  // Subnormal results: |x| * 2^9 rounded to an integer (0 .. 8; 8 is the
  // smallest normal's code) by the f32 addition of 2^23, whose unit is 1.
  Value sum = arith::AddFOp::create(
      b, arith::MulFOp::create(b, arith::BitcastOp::create(b, f32, a), splatF(b, f32, 512.0f)),
      splatF(b, f32, 8388608.0f));
  Value subnormal =
      arith::SubIOp::create(b, arith::BitcastOp::create(b, i32, sum), splat(b, i32, 0x4b000000));
  Value isSubnormal =
      arith::CmpIOp::create(b, arith::CmpIPredicate::ult, a, splat(b, i32, 0x3c800000));
  Value code = arith::SelectOp::create(b, isSubnormal, subnormal, normal);
  code = arith::SelectOp::create(b, isNan, splat(b, i32, 0x7f), code);
  code = arith::OrIOp::create(b, code, sign);
  return arith::TruncIOp::create(b, withElement(values.getType(), b.getI8Type()), code);
}

Value roundAsCached(ImplicitLocOpBuilder &b, Value value, KvStorage storage) {
  return widenCached(b, narrowToCache(b, value, storage), storage);
}

Value loadCachedF32(ImplicitLocOpBuilder &b, Value cache, ValueRange indices, int64_t lanes,
                    KvStorage storage, int64_t alignBytes) {
  auto stored = VectorType::get({lanes}, kvElementType(b, storage.element));
  Value v = vector::LoadOp::create(b, stored, cache, indices, /*nontemporal=*/false,
                                   alignment(alignBytes));
  return widenCached(b, v, storage);
}

Value widenCached(ImplicitLocOpBuilder &b, Value stored, KvStorage storage) {
  switch (storage.element) {
  case KvElement::F32:
    return stored;
  case KvElement::BF16:
    return arith::ExtFOp::create(b, withElement(stored.getType(), b.getF32Type()), stored);
  case KvElement::FP8:
    break;
  }
  return scaled(b, decodeE4m3(b, stored), storage.scale);
}

Value narrowToCache(ImplicitLocOpBuilder &b, Value f32Vector, KvStorage storage) {
  switch (storage.element) {
  case KvElement::F32:
    return f32Vector;
  case KvElement::BF16:
    return arith::TruncFOp::create(b, withElement(f32Vector.getType(), b.getBF16Type()), f32Vector);
  case KvElement::FP8:
    break;
  }
  return encodeE4m3(b, unscaled(b, f32Vector, storage.scale));
}

void storeToCache(ImplicitLocOpBuilder &b, Value f32Vector, Value cache, ValueRange indices,
                  KvStorage storage, int64_t alignBytes) {
  vector::StoreOp::create(b, narrowToCache(b, f32Vector, storage), cache, indices,
                          /*nontemporal=*/false, alignment(alignBytes));
}

std::string pageSuffix(const AttentionShape &shape) {
  return shape.paged() ? "_p" + std::to_string(shape.pageTokens) : "";
}

TokenState tokenState(ImplicitLocOpBuilder &b, SequenceLayout sequences, Value positions,
                      Value past, Value t, Value stride, Value c0) {
  TokenState s;
  if (!sequences) {
    s.past = arith::AddIOp::create(b, past, c0);
    s.position = arith::AddIOp::create(b, past, t);
    s.base = arith::AddIOp::create(b, c0, c0);
    s.row0 = arith::AddIOp::create(b, c0, c0);
    return s;
  }
  Value at = memref::LoadOp::create(b, positions, ValueRange{t});
  if (sequences.rows == 1) {
    s.past = arith::IndexCastOp::create(b, b.getIndexType(), at);
    s.position = arith::AddIOp::create(b, s.past, c0);
    s.base = arith::MulIOp::create(b, t, stride);
    s.row0 = arith::AddIOp::create(b, t, c0);
    return s;
  }
  // Token t is row j of its conversation's rows: the call's K/V of that
  // conversation start j rows and j positions before it.
  Value rows = arith::ConstantIndexOp::create(b, sequences.rows);
  Value j = arith::RemUIOp::create(b, t, rows);
  s.position = arith::IndexCastOp::create(b, b.getIndexType(), at);
  s.past = arith::SubIOp::create(b, s.position, j);
  s.base = arith::MulIOp::create(b, arith::DivUIOp::create(b, t, rows), stride);
  s.row0 = arith::SubIOp::create(b, t, j);
  return s;
}

CacheRows::CacheRows(ImplicitLocOpBuilder &b, const AttentionShape &shape, SequenceLayout sequences,
                     Value cache, Value table) {
  Value c0 = arith::ConstantIndexOp::create(b, 0);
  if (shape.paged()) {
    pageTokens_ = shape.pageTokens;
    table_ = table;
    pages_ = memref::DimOp::create(b, table, c0);
    if (sequences)
      pages_ =
          arith::DivUIOp::create(b, pages_, arith::ConstantIndexOp::create(b, sequences.count));
    return;
  }
  slots_ = memref::DimOp::create(b, cache, c0);
  if (sequences)
    slots_ = arith::DivUIOp::create(b, slots_, arith::ConstantIndexOp::create(b, sequences.count));
}

Value CacheRows::row(ImplicitLocOpBuilder &b, Value base, Value position) const {
  if (!paged())
    return arith::AddIOp::create(b, base, arith::RemUIOp::create(b, position, slots_));
  Value size = arith::ConstantIndexOp::create(b, pageTokens_);
  Value entry = arith::AddIOp::create(b, base, arith::DivUIOp::create(b, position, size));
  Value page = arith::IndexCastOp::create(b, b.getIndexType(),
                                          memref::LoadOp::create(b, table_, ValueRange{entry}));
  return arith::AddIOp::create(b, arith::MulIOp::create(b, page, size),
                               arith::RemUIOp::create(b, position, size));
}

void appendPageTable(Builder &b, const AttentionShape &shape, std::vector<Type> &types) {
  if (shape.paged())
    types.push_back(MemRefType::get({ShapedType::kDynamic}, b.getI32Type()));
}

} // namespace kiln::kernels
