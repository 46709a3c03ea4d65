#include "targets/common/KvCacheAccess.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;

int64_t kvElementBytes(KvElement element) { return element == KvElement::BF16 ? 2 : 4; }

std::string kvSuffix(KvElement element) { return element == KvElement::BF16 ? "_kvbf16" : ""; }

Type kvElementType(Builder &b, KvElement element) {
  return element == KvElement::BF16 ? Type(b.getBF16Type()) : Type(b.getF32Type());
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
} // namespace

Value roundAsCached(ImplicitLocOpBuilder &b, Value value, KvElement element) {
  if (element == KvElement::F32)
    return value;
  Value narrow = arith::TruncFOp::create(b, withElement(value.getType(), b.getBF16Type()), value);
  return arith::ExtFOp::create(b, value.getType(), narrow);
}

Value loadCachedF32(ImplicitLocOpBuilder &b, Value cache, ValueRange indices, int64_t lanes,
                    KvElement element, int64_t alignBytes) {
  auto stored = VectorType::get({lanes}, kvElementType(b, element));
  Value v = vector::LoadOp::create(b, stored, cache, indices, /*nontemporal=*/false,
                                   alignment(alignBytes));
  if (element == KvElement::F32)
    return v;
  return arith::ExtFOp::create(b, VectorType::get({lanes}, b.getF32Type()), v);
}

void storeToCache(ImplicitLocOpBuilder &b, Value f32Vector, Value cache, ValueRange indices,
                  KvElement element, int64_t alignBytes) {
  Value v = f32Vector;
  if (element != KvElement::F32)
    v = arith::TruncFOp::create(b, withElement(v.getType(), kvElementType(b, element)), v);
  vector::StoreOp::create(b, v, cache, indices, /*nontemporal=*/false, alignment(alignBytes));
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
