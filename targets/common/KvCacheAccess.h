// How attention kernels read and write a KV cache of either element type
// (AttentionShape.h): loads widen to f32, stores narrow, and the call's own
// keys and values are rounded as the cache would hold them, so that a key
// reads the same from the cache as from the call.
#pragma once

#include "targets/common/AttentionShape.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <cstdint>
#include <vector>

namespace kiln::kernels {

// The cache's element type as kernels declare it: f32, bf16, or i8 (an FP8
// cache's e4m3 codes).
mlir::Type kvElementType(mlir::Builder &b, KvElement element);

// `value` (f32, a scalar or a vector) as a cache of `storage` holds it: for
// bf16 rounded to nearest even and widened back; for FP8 the e4m3 code of
// value / scale read back times the scale; for f32 itself.
mlir::Value roundAsCached(mlir::ImplicitLocOpBuilder &b, mlir::Value value, KvStorage storage);

// `lanes` consecutive elements of `cache` at `indices` as a vector of f32.
mlir::Value loadCachedF32(mlir::ImplicitLocOpBuilder &b, mlir::Value cache,
                          mlir::ValueRange indices, int64_t lanes, KvStorage storage,
                          int64_t alignBytes = 0);

// Elements as a cache of `storage` stores them (a vector loaded from it) as
// f32.
mlir::Value widenCached(mlir::ImplicitLocOpBuilder &b, mlir::Value stored, KvStorage storage);

// An f32 vector as a cache of `storage` stores it: itself, bf16, or e4m3
// codes of value / scale (i8).
mlir::Value narrowToCache(mlir::ImplicitLocOpBuilder &b, mlir::Value f32Vector, KvStorage storage);

// Stores an f32 vector into `cache` at `indices`, narrowed to its element type.
void storeToCache(mlir::ImplicitLocOpBuilder &b, mlir::Value f32Vector, mlir::Value cache,
                  mlir::ValueRange indices, KvStorage storage, int64_t alignBytes = 0);

// E4M3 codes (i8, a scalar or a vector) and f32 values, by integer
// arithmetic every target has (no FP8 instructions): decoding is exact, NaN
// code to NaN; encoding rounds to nearest even, saturates at 448, and keeps
// NaN (code 0x7f with its sign). The same as kiln::floatToE4m3 and
// e4m3ToFloat (runtime/core/Float.h), which the interpreter uses.
mlir::Value decodeE4m3(mlir::ImplicitLocOpBuilder &b, mlir::Value codes);
mlir::Value encodeE4m3(mlir::ImplicitLocOpBuilder &b, mlir::Value values);

// Where a token's keys live: per token its positions before this call
// (past), its position, its conversation's base (its first slot unpaged,
// its first page table entry paged: CacheRows::stride() times the
// conversation) and the row of this call's K/V at position `past` (row0). A
// sequential entry's tokens share one.
struct TokenState {
  mlir::Value past, position, base, row0;
};
TokenState tokenState(mlir::ImplicitLocOpBuilder &b, SequenceLayout sequences,
                      mlir::Value positions, mlir::Value past, mlir::Value t, mlir::Value stride,
                      mlir::Value c0);

// The cache row that holds a conversation's position. Unpaged, each
// conversation has `slots` rows one after another (a sliding layer's ring,
// a global layer's context), position p at slot p % slots. Paged (a global
// layer with AttentionShape::pageTokens P), the rows are one pool of pages
// of P and position p of conversation c is row table[c * pages + p / P] * P
// + p % P, `pages` the table's entries per conversation.
class CacheRows {
public:
  // `cache`: a K or V cache argument; `table`: the page table argument
  // (i32 [conversations * pages]) of a paged shape, else null.
  CacheRows(mlir::ImplicitLocOpBuilder &b, const AttentionShape &shape, SequenceLayout sequences,
            mlir::Value cache, mlir::Value table);
  bool paged() const { return pageTokens_ > 0; }
  // Unpaged: a conversation's slots (a ring wraps past them).
  mlir::Value slots() const { return slots_; }
  // What a conversation's base advances by: its slots, or its page table
  // entries.
  mlir::Value stride() const { return paged() ? pages_ : slots_; }
  // The row of `position` of the conversation at `base` (TokenState).
  mlir::Value row(mlir::ImplicitLocOpBuilder &b, mlir::Value base, mlir::Value position) const;

private:
  int64_t pageTokens_ = 0;
  mlir::Value slots_, table_, pages_;
};

// The types of a paged shape's page table argument (none unpaged): kernels
// append it to their buffers.
void appendPageTable(mlir::Builder &b, const AttentionShape &shape, std::vector<mlir::Type> &types);

} // namespace kiln::kernels
