// How attention kernels read and write a KV cache of either element type
// (AttentionShape.h): loads widen to f32, stores narrow, and the call's own
// keys and values are rounded as the cache would hold them, so that a key
// reads the same from the cache as from the call.
#pragma once

#include "targets/common/AttentionShape.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cstdint>

namespace kiln::kernels {

// The cache's element type as kernels declare it.
mlir::Type kvElementType(mlir::Builder &b, KvElement element);

// `value` (f32, a scalar or a vector) as a cache of `element` holds it: for
// bf16 rounded to nearest even and widened back; for f32 itself.
mlir::Value roundAsCached(mlir::ImplicitLocOpBuilder &b, mlir::Value value, KvElement element);

// `lanes` consecutive elements of `cache` at `indices` as a vector of f32.
mlir::Value loadCachedF32(mlir::ImplicitLocOpBuilder &b, mlir::Value cache,
                          mlir::ValueRange indices, int64_t lanes, KvElement element,
                          int64_t alignBytes = 0);

// Stores an f32 vector into `cache` at `indices`, narrowed to its element type.
void storeToCache(mlir::ImplicitLocOpBuilder &b, mlir::Value f32Vector, mlir::Value cache,
                  mlir::ValueRange indices, KvElement element, int64_t alignBytes = 0);

// Where a token's keys live: the slots a conversation has (from the key
// cache), and per token its positions before this call (past), its
// position, its conversation's first slot (base) and the row of this call's
// K/V at position `past` (row0). A sequential entry's tokens share one.
mlir::Value cacheSlots(mlir::ImplicitLocOpBuilder &b, mlir::Value cache, mlir::Value c0,
                       SequenceLayout sequences);
struct TokenState {
  mlir::Value past, position, base, row0;
};
TokenState tokenState(mlir::ImplicitLocOpBuilder &b, SequenceLayout sequences,
                      mlir::Value positions, mlir::Value past, mlir::Value t, mlir::Value slots,
                      mlir::Value c0);

} // namespace kiln::kernels
