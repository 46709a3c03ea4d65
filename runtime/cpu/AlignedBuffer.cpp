#include "runtime/cpu/AlignedBuffer.h"

#include "runtime/cpu/RuntimeError.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <sys/mman.h>

namespace kiln {
namespace {

// Large buffers come straight from mmap: page aligned, and zero pages cost
// nothing until touched (a KV cache for a long context is mostly unused).
constexpr size_t kMapThreshold = size_t{1} << 20;

std::string describe(size_t size) { return std::to_string(size) + " bytes"; }

} // namespace

AlignedBuffer::AlignedBuffer(size_t size, const std::string &what) {
  if (size == 0)
    return;
  if (size >= kMapThreshold) {
    void *memory =
        ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED)
      throw RuntimeError("cannot allocate " + what + " (" + describe(size) +
                         "): " + std::strerror(errno));
    // Huge pages where the kernel allows them: far fewer page faults while
    // weights are written and TLB misses while kernels stream them.
    ::madvise(memory, size, MADV_HUGEPAGE);
    data_ = static_cast<uint8_t *>(memory);
    mapped_ = true;
  } else {
    const size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    data_ = static_cast<uint8_t *>(std::aligned_alloc(kAlignment, rounded));
    if (!data_)
      throw RuntimeError("cannot allocate " + what + " (" + describe(size) + ")");
    std::memset(data_, 0, rounded);
  }
  size_ = size;
}

AlignedBuffer::AlignedBuffer(AlignedBuffer &&other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

AlignedBuffer &AlignedBuffer::operator=(AlignedBuffer &&other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

AlignedBuffer::~AlignedBuffer() { release(); }

void AlignedBuffer::release() noexcept {
  if (mapped_)
    ::munmap(data_, size_);
  else
    std::free(data_);
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

} // namespace kiln
