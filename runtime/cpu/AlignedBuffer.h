// An owned, zero-filled, 64-byte aligned block of memory: arenas, KV caches,
// bound weights and kernel inputs all live in these, so every buffer a kernel
// sees starts on a cache line (and an AVX-512 vector).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

class AlignedBuffer {
public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  // Throws RuntimeError naming `what` when the memory cannot be had.
  explicit AlignedBuffer(size_t size, const std::string &what = "buffer");
  AlignedBuffer(AlignedBuffer &&other) noexcept;
  AlignedBuffer &operator=(AlignedBuffer &&other) noexcept;
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  ~AlignedBuffer();

  uint8_t *data() { return data_; }
  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

private:
  void release() noexcept;

  uint8_t *data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false; // from mmap (large) rather than aligned_alloc
};

} // namespace kiln
