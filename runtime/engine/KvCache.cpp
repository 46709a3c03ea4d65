#include "runtime/engine/KvCache.h"

#include "runtime/cpu/RuntimeError.h"

#include <cstring>
#include <limits>
#include <string>

namespace kiln {
namespace {

uint64_t tokenBytes(const KvCacheSpec &spec) {
  return uint64_t{spec.kvHeads} * spec.headDim * static_cast<uint64_t>(dtypeSize(spec.dtype));
}

} // namespace

int64_t kvCacheSlots(const KvCacheSpec &spec, int64_t contextLength) {
  if (spec.isGlobal())
    return contextLength;
  return spec.ring ? int64_t{spec.ring} : int64_t{spec.window};
}

uint64_t kvCacheBufferBytes(const KvCacheSpec &spec, int64_t contextLength) {
  if (contextLength < 1)
    throw RuntimeError("context length " + std::to_string(contextLength) + " must be at least 1");
  const std::string name = "KV cache of layer " + std::to_string(spec.layer);
  if (spec.kvHeads == 0 || spec.headDim == 0)
    throw RuntimeError(name + ": kv_heads " + std::to_string(spec.kvHeads) + " and head_dim " +
                       std::to_string(spec.headDim) + " must be positive");
  const uint64_t perToken = tokenBytes(spec);
  const uint64_t slotCount = static_cast<uint64_t>(kvCacheSlots(spec, contextLength));
  if (slotCount > std::numeric_limits<uint64_t>::max() / 4 / perToken)
    throw RuntimeError(name + ": " + std::to_string(slotCount) + " slots are too many");
  return slotCount * perToken;
}

KvCaches::KvCaches(std::vector<KvCacheSpec> specs, int64_t contextLength)
    : specs_(std::move(specs)), contextLength_(contextLength) {
  if (contextLength < 1)
    throw RuntimeError("context length " + std::to_string(contextLength) + " must be at least 1");
  buffers_.reserve(2 * specs_.size());
  for (const KvCacheSpec &spec : specs_) {
    const std::string name = "KV cache of layer " + std::to_string(spec.layer);
    const uint64_t bytes = kvCacheBufferBytes(spec, contextLength);
    buffers_.emplace_back(bytes, name + " (K)");
    buffers_.emplace_back(bytes, name + " (V)");
  }
}

int64_t KvCaches::slots(size_t cache) const { return kvCacheSlots(specs_[cache], contextLength_); }

uint64_t KvCaches::globalBytesPerToken() const {
  uint64_t bytes = 0;
  for (const KvCacheSpec &spec : specs_)
    if (spec.isGlobal())
      bytes += 2 * tokenBytes(spec);
  return bytes;
}

uint64_t KvCaches::slidingBytesPerToken() const {
  uint64_t bytes = 0;
  for (const KvCacheSpec &spec : specs_)
    if (!spec.isGlobal())
      bytes += 2 * tokenBytes(spec);
  return bytes;
}

uint64_t KvCaches::totalBytes() const {
  uint64_t bytes = 0;
  for (const AlignedBuffer &buffer : buffers_)
    bytes += buffer.size();
  return bytes;
}

void KvCaches::clear() {
  for (AlignedBuffer &buffer : buffers_)
    if (!buffer.empty())
      std::memset(buffer.data(), 0, buffer.size());
}

} // namespace kiln
