// The KV caches of an artifact: K and V of every attention layer, each
// [slots, kv_heads, head_dim]. A global layer keeps every position up to the
// runtime's context length; a sliding layer keeps a ring of `ring` slots
// (docs/runtime-abi.md, "Buffers"). The memory is zero-filled and 64-byte
// aligned; which slot a position goes to is the kernels' business.
#pragma once

#include "runtime/core/DType.h"
#include "runtime/cpu/AlignedBuffer.h"

#include <cstdint>
#include <vector>

namespace kiln {

// One artifact `KvCache` entry.
struct KvCacheSpec {
  uint32_t layer = 0;
  uint32_t window = 0; // 0: global
  uint32_t kvHeads = 0;
  uint32_t headDim = 0;
  DType dtype = DType::BF16;
  // A sliding layer's slots: its window plus the positions a verify call
  // may roll back (0: the window).
  uint32_t ring = 0;
  // A global layer's page of positions (KvPages.h); 0: unpaged.
  uint32_t pageTokens = 0;

  bool isGlobal() const { return window == 0; }
  bool isPaged() const { return pageTokens > 0 && window == 0; }
};

// Slots of a cache: its ring (`window`, or more where a verify call may roll
// back) for a sliding layer, `contextLength` for a global one.
int64_t kvCacheSlots(const KvCacheSpec &spec, int64_t contextLength);
// Bytes of its K (or V) buffer, [slots, kv_heads, head_dim]. Throws
// RuntimeError naming the layer for an empty shape or a size that overflows,
// and for a context length below 1.
uint64_t kvCacheBufferBytes(const KvCacheSpec &spec, int64_t contextLength);

class KvCaches {
public:
  KvCaches() = default;
  // Allocates K and V for every spec. Throws RuntimeError naming the layer
  // for an empty shape, and for a context length below 1.
  KvCaches(std::vector<KvCacheSpec> specs, int64_t contextLength);

  int64_t contextLength() const { return contextLength_; }
  size_t numCaches() const { return specs_.size(); }
  const KvCacheSpec &spec(size_t cache) const { return specs_[cache]; }
  // `window` for a sliding layer, the context length for a global one.
  int64_t slots(size_t cache) const;

  // Buffers are numbered as BufferRef.index of kind KvCache: cache index / 2,
  // K when even, V when odd.
  size_t numBuffers() const { return buffers_.size(); }
  uint8_t *buffer(size_t index) { return buffers_[index].data(); }
  uint64_t bufferBytes(size_t index) const { return buffers_[index].size(); }

  // Bytes one more token of context costs, K and V of every global layer.
  uint64_t globalBytesPerToken() const;
  // Bytes one token takes in the sliding layers while the context is shorter
  // than their windows; a sliding layer never holds more than its window.
  uint64_t slidingBytesPerToken() const;
  uint64_t totalBytes() const;

  // Zeroes every cache (a new conversation).
  void clear();

private:
  std::vector<KvCacheSpec> specs_;
  int64_t contextLength_ = 0;
  std::vector<AlignedBuffer> buffers_;
};

} // namespace kiln
