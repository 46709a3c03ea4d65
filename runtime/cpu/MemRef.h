// The memref descriptor a kernel receives for each buffer argument
// (docs/runtime-abi.md, "Kernels"): MLIR's ranked memref layout,
//   { void *allocated; void *aligned; int64_t offset;
//     int64_t sizes[R]; int64_t strides[R]; }
// The runtime passes allocated == aligned == the buffer address, offset 0 and
// row-major contiguous strides, in elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>

namespace kiln::memref {

// Ranks a kernel argument may have.
constexpr int kMinRank = 1;
constexpr int kMaxRank = 6;

template <int R> struct Descriptor {
  static_assert(R >= kMinRank && R <= kMaxRank, "unsupported memref rank");
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[R];
  int64_t strides[R];
};

static_assert(offsetof(Descriptor<1>, sizes) == 24, "MLIR descriptor layout");
static_assert(sizeof(Descriptor<3>) == 24 + 2 * 3 * 8, "MLIR descriptor layout");

// Room for a descriptor of any supported rank.
struct DescriptorStorage {
  alignas(Descriptor<kMaxRank>) unsigned char bytes[sizeof(Descriptor<kMaxRank>)];
};

namespace detail {
template <int R> void *fill(DescriptorStorage &storage, void *base, const int64_t *sizes) {
  auto *descriptor = new (storage.bytes) Descriptor<R>;
  descriptor->allocated = base;
  descriptor->aligned = base;
  descriptor->offset = 0;
  int64_t stride = 1;
  for (int i = R - 1; i >= 0; --i) {
    descriptor->sizes[i] = sizes[i];
    descriptor->strides[i] = stride;
    stride *= sizes[i];
  }
  return descriptor;
}
} // namespace detail

// Writes a descriptor of rank `rank` for the contiguous row-major buffer at
// `base` with `sizes` into `storage` and returns its address (the kernel
// argument); nullptr for a rank outside [kMinRank, kMaxRank].
inline void *buildDescriptor(DescriptorStorage &storage, void *base, const int64_t *sizes,
                             int rank) {
  switch (rank) {
  case 1:
    return detail::fill<1>(storage, base, sizes);
  case 2:
    return detail::fill<2>(storage, base, sizes);
  case 3:
    return detail::fill<3>(storage, base, sizes);
  case 4:
    return detail::fill<4>(storage, base, sizes);
  case 5:
    return detail::fill<5>(storage, base, sizes);
  case 6:
    return detail::fill<6>(storage, base, sizes);
  default:
    return nullptr;
  }
}

} // namespace kiln::memref
