#include "runtime/cuda/TensorMap.h"

#include "runtime/cpu/RuntimeError.h"

#include <cstdio>

namespace kiln::cuda {
namespace {

// cuTensorMapEncodeTiled's limits (cuda.h).
constexpr uint32_t kMaxBoxSide = 256;
constexpr uint64_t kAlignBytes = 16;                  // base address, rows, strides
constexpr uint64_t kMaxDimension = uint64_t{1} << 32; // elements
constexpr uint64_t kMaxStride = uint64_t{1} << 40;    // bytes, exclusive

[[noreturn]] void fail(const std::string &where, const std::string &reason) {
  throw RuntimeError(where + ": " + reason);
}

// CUtensorMapDataType of the element types the kernels use; -1 for others.
int dataTypeOf(DType dtype) {
  switch (dtype) {
  case DType::BF16:
    return kTensorMapBfloat16;
  case DType::F16:
    return kTensorMapFloat16;
  case DType::F32:
    return kTensorMapFloat32;
  default:
    return -1;
  }
}

// CUtensorMapSwizzle of a span in bytes; -1 for an unknown span.
int swizzleOf(uint32_t span) {
  switch (span) {
  case 0:
    return kTensorMapSwizzleNone;
  case 32:
    return kTensorMapSwizzle32B;
  case 64:
    return kTensorMapSwizzle64B;
  case 128:
    return kTensorMapSwizzle128B;
  default:
    return -1;
  }
}

std::string hexAddress(uint64_t address) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return text;
}

} // namespace

void checkTensorMapSpec(const TensorMapSpec &spec, int rank, const std::string &where) {
  const std::string type(dtypeName(spec.dtype));
  if (dataTypeOf(spec.dtype) < 0)
    fail(where, "a tensor map of " + type + " elements (it takes BF16, F16 or F32)");
  if (rank < 1 || rank > kMaxTensorMapRank)
    fail(where, "a tensor map of a rank-" + std::to_string(rank) + " buffer (it takes ranks 1.." +
                    std::to_string(kMaxTensorMapRank) + ")");
  if (spec.box.size() != static_cast<size_t>(rank))
    fail(where, "a box of " + std::to_string(spec.box.size()) + " sides for a rank-" +
                    std::to_string(rank) + " buffer (one per dimension, innermost first)");
  for (size_t d = 0; d < spec.box.size(); ++d)
    if (spec.box[d] < 1 || spec.box[d] > kMaxBoxSide)
      fail(where, "box side " + std::to_string(d) + " of " + std::to_string(spec.box[d]) +
                      " elements (1.." + std::to_string(kMaxBoxSide) + ")");
  const uint64_t row = uint64_t{spec.box[0]} * static_cast<uint64_t>(dtypeSize(spec.dtype));
  const std::string rowText = "the box's rows of " + std::to_string(spec.box[0]) + " " + type +
                              " are " + std::to_string(row) + " bytes";
  if (row % kAlignBytes != 0)
    fail(where, rowText + ", not a multiple of " + std::to_string(kAlignBytes));
  if (swizzleOf(spec.swizzle) < 0)
    fail(where,
         "a swizzle of " + std::to_string(spec.swizzle) + " bytes (it takes 0, 32, 64 or 128)");
  if (spec.swizzle != 0 && row > spec.swizzle)
    fail(where, rowText + ", more than the " + std::to_string(spec.swizzle) + "-byte swizzle span");
}

TensorMapEncoding encodeTensorMap(const TensorMapSpec &spec, const BufferArgument &buffer,
                                  const std::string &where) {
  checkTensorMapSpec(spec, buffer.rank, where);
  if (buffer.address % kAlignBytes != 0)
    fail(where, "the buffer's address " + hexAddress(buffer.address) + " is not " +
                    std::to_string(kAlignBytes) + "-byte aligned");
  const int rank = buffer.rank;
  const uint64_t element = static_cast<uint64_t>(dtypeSize(spec.dtype));
  TensorMapEncoding encoding;
  encoding.dataType = dataTypeOf(spec.dtype);
  encoding.rank = static_cast<uint32_t>(rank);
  encoding.globalAddress = buffer.address;
  uint64_t stride = element; // bytes between consecutive entries of dimension d
  bool huge = false;         // the stride is 2^64 bytes or more
  for (int d = 0; d < rank; ++d) {
    const int64_t size = buffer.sizes[rank - 1 - d];
    if (size < 1 || static_cast<uint64_t>(size) > kMaxDimension)
      fail(where, "dimension " + std::to_string(rank - 1 - d) + " of the buffer has " +
                      std::to_string(size) + " elements (a tensor map takes 1..2^32)");
    if (d > 0) {
      if (huge || stride % kAlignBytes != 0 || stride >= kMaxStride)
        fail(where, "dimension " + std::to_string(rank - 1 - d) +
                        " of the buffer has a stride of " +
                        (huge ? std::string("2^64 or more") : std::to_string(stride)) +
                        " bytes (a tensor map takes multiples of " + std::to_string(kAlignBytes) +
                        " below 2^40)");
      encoding.globalStrides[d - 1] = stride;
    }
    encoding.globalDim[d] = static_cast<uint64_t>(size);
    encoding.boxDim[d] = spec.box[d];
    encoding.elementStrides[d] = 1;
    huge = huge || __builtin_mul_overflow(stride, static_cast<uint64_t>(size), &stride);
  }
  encoding.swizzle = swizzleOf(spec.swizzle);
  return encoding;
}

} // namespace kiln::cuda
