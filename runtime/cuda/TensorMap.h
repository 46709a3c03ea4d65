// CUDA tensor maps (schema 1.5's Launch.tensor_maps, docs/runtime-abi.md):
// the arguments of the cuTensorMapEncodeTiled call that describes one call's
// buffer to a kernel's TMA copies. Pure: no driver is needed; GpuBackend
// encodes, uploads and caches the maps.
//
// The buffer is row-major and contiguous; a tensor map counts dimensions
// from the innermost, so dimension 0 of the map is the buffer's last.
#pragma once

#include "runtime/cuda/CudaDriver.h"
#include "runtime/engine/Backend.h"

#include <cstdint>
#include <string>

namespace kiln::cuda {

// The most dimensions a tensor map has.
constexpr int kMaxTensorMapRank = 5;

// The arguments of one cuTensorMapEncodeTiled call, dimension 0 innermost.
struct TensorMapEncoding {
  int dataType = 0; // CUtensorMapDataType
  uint32_t rank = 0;
  CUdeviceptr globalAddress = 0;
  uint64_t globalDim[kMaxTensorMapRank] = {};
  uint64_t globalStrides[kMaxTensorMapRank - 1] = {}; // bytes, of dimensions 1..rank-1
  uint32_t boxDim[kMaxTensorMapRank] = {};
  uint32_t elementStrides[kMaxTensorMapRank] = {};
  int interleave = kTensorMapInterleaveNone;
  int swizzle = kTensorMapSwizzleNone;
  int l2Promotion = kTensorMapL2Promotion128B;
  int oobFill = kTensorMapOobFillNone;
};

// Checks what does not depend on the call, for a buffer of rank `rank`: the
// element type (BF16, F16, F32), the rank (1..5), the box (one side per
// dimension, each 1..256 elements, rows a multiple of 16 bytes and within
// the swizzle span) and the swizzle (0, 32, 64, 128). Throws RuntimeError
// "<where>: ..." naming the first problem.
void checkTensorMapSpec(const TensorMapSpec &spec, int rank, const std::string &where);

// The encoding of `spec` over `buffer` (its address and this call's sizes):
// the sizes reversed as globalDim, the byte strides of dimensions 1.., unit
// element strides, no interleave, the swizzle, 128-byte L2 promotion and
// zeros for elements out of bounds. Throws RuntimeError "<where>: ..." for
// what checkTensorMapSpec refuses and for a call the map cannot take: an
// address not 16-byte aligned, a dimension of 0 or more than 2^32 elements,
// a stride not a multiple of 16 bytes or of 2^40 bytes or more.
TensorMapEncoding encodeTensorMap(const TensorMapSpec &spec, const BufferArgument &buffer,
                                  const std::string &where);

} // namespace kiln::cuda
