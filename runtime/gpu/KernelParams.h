// The parameters of a kernel launch on a GPU, NVIDIA's or AMD's
// (docs/runtime-abi.md, "Kernels (nvptx target)"), MLIR's GPU kernel
// convention: each memref argument expanded into its descriptor's fields,
// one parameter each
//   allocated pointer, aligned pointer, offset, sizes[R], strides[R]
// (both pointers the buffer's device address, offset 0, row-major contiguous
// strides in elements), then one i64 per scalar. Every parameter is 8 bytes;
// cuLaunchKernel and hipModuleLaunchKernel take an array with a pointer to
// each parameter's value.
// A TensorMap scalar (schema 1.5) is the device address of its map, which
// KernelParams substitutes for the map's index the engine passes.
#pragma once

#include "runtime/engine/Backend.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::gpu {

// Parameters of a launch whose buffers have `ranks`, with `numScalars`
// scalars: the sum of 3 + 2R over the buffers, plus the scalars.
size_t kernelParamCount(const std::vector<int> &ranks, size_t numScalars);

// The parameter values of one call, in order, into `values`
// (kernelParamCount of them). buffers[b].rank gives each buffer's rank.
void packKernelParams(const BufferArgument *buffers, size_t numBuffers, const int64_t *scalars,
                      size_t numScalars, uint64_t *values);

// A launch's parameter values and the pointer array a launch takes.
class KernelParams {
public:
  KernelParams(std::vector<int> ranks, size_t numScalars);
  // Copies the values; the copy's pointers point at its own.
  KernelParams(const KernelParams &other);
  KernelParams &operator=(const KernelParams &other);

  // TensorMap scalars: each one's value indexes `addresses` (the device
  // copies of the launch's maps) and its parameter is that address. `kinds`
  // are the scalars' kinds. Set before the first pack.
  void mapTensorMaps(const std::vector<artifact::ScalarKind> &kinds,
                     std::vector<uint64_t> addresses);

  // Packs one call's arguments (one buffer per rank, the scalars); returns
  // whether any value differs from the ones held before.
  bool pack(const BufferArgument *buffers, const int64_t *scalars);

  size_t size() const { return values_.size(); }
  const std::vector<uint64_t> &values() const { return values_; }
  // kernelParams for the launch: pointers()[i] points at values()[i].
  void **pointers() { return pointers_.data(); }

private:
  void point();

  std::vector<int> ranks_;
  size_t numScalars_ = 0;
  std::vector<size_t> mapScalars_;     // the TensorMap scalars' positions
  std::vector<uint64_t> mapAddresses_; // what their values index
  std::vector<uint64_t> values_, scratch_;
  std::vector<void *> pointers_;
};

} // namespace kiln::gpu
