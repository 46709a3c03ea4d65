// What an attention kernel is specialised to: its heads, head_dim, sliding
// window, scale, and the element type of the KV cache it reads and writes.
// Every target's attention kernels and hooks take it whole.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::kernels {

// The KV cache's element type (kiln.attention's kv_type). Attention reads
// every key and value rounded to it, the call's own as well as the cached
// ones, as the interpreter does. FP8 is e4m3 (OCP, finite, NaN S.1111.111)
// with one scale per tensor (kiln.attention's kv_scales).
enum class KvElement { F32, BF16, FP8 };

int64_t kvElementBytes(KvElement element);
// The tiling's "kv_cache" entry: "bf16", "fp8" (f32 caches have none).
const char *kvElementName(KvElement element);

// How one cache, a layer's keys or its values, holds an element: its type
// and, FP8, the scale its codes are multiplied by.
struct KvStorage {
  KvElement element = KvElement::F32;
  double scale = 1;
};

// How a call's tokens map to conversations. `count` 0: every token continues
// the one conversation whose caches are bound. `count` N: the caches hold N
// conversations one after another, and token t continues conversation
// t / rows at positions[t], a conversation's `rows` tokens at consecutive
// positions (batched decode: rows 1; batched verify: the last accepted token
// and the drafts).
struct SequenceLayout {
  int64_t count = 0;
  int64_t rows = 1;
  explicit operator bool() const { return count > 0; }
};

struct AttentionShape {
  int64_t qHeads = 0, kvHeads = 0, headDim = 0;
  int64_t window = 0; // 0: a global layer
  double scale = 1;
  KvElement cache = KvElement::F32;
  // A global layer's cache in pages of this many positions (0: each
  // conversation's positions one after another). A paged cache is one pool
  // of pages for every conversation, and its kernels take a page table
  // (i32, each conversation's pages in order) as their last buffer.
  int64_t pageTokens = 0;
  // An FP8 cache's per-tensor scales (kv_scales).
  double keyScale = 1, valueScale = 1;
  int64_t group() const { return qHeads / kvHeads; }
  bool paged() const { return pageTokens > 0 && window == 0; }
  KvStorage keys() const { return {cache, cache == KvElement::FP8 ? keyScale : 1}; }
  KvStorage values() const { return {cache, cache == KvElement::FP8 ? valueScale : 1}; }
};

// The kernel name suffix of the cache's element type: none for f32 (the
// names f32 caches always had), "_kvbf16", "_kvf8", and for FP8 scales other
// than 1 both as f32 bits ("_kvf8_3c23d70a_3b83126f": kernels with other
// scales are other kernels).
std::string kvSuffix(const AttentionShape &shape);

// The kernel name suffix of a paged cache: "_p64" for pages of 64.
std::string pageSuffix(const AttentionShape &shape);

} // namespace kiln::kernels
