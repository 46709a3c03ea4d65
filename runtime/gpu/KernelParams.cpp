#include "runtime/gpu/KernelParams.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kiln::gpu {

size_t kernelParamCount(const std::vector<int> &ranks, size_t numScalars) {
  size_t count = numScalars;
  for (int rank : ranks)
    count += 3 + 2 * static_cast<size_t>(rank);
  return count;
}

void packKernelParams(const BufferArgument *buffers, size_t numBuffers, const int64_t *scalars,
                      size_t numScalars, uint64_t *values) {
  for (size_t b = 0; b < numBuffers; ++b) {
    const BufferArgument &buffer = buffers[b];
    const int rank = buffer.rank;
    *values++ = buffer.address; // allocated
    *values++ = buffer.address; // aligned
    *values++ = 0;              // offset
    for (int d = 0; d < rank; ++d)
      *values++ = static_cast<uint64_t>(buffer.sizes[d]);
    int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      values[d] = static_cast<uint64_t>(stride);
      stride *= buffer.sizes[d];
    }
    values += rank;
  }
  for (size_t s = 0; s < numScalars; ++s)
    *values++ = static_cast<uint64_t>(scalars[s]);
}

KernelParams::KernelParams(std::vector<int> ranks, size_t numScalars)
    : ranks_(std::move(ranks)), numScalars_(numScalars),
      values_(kernelParamCount(ranks_, numScalars)), scratch_(values_.size()),
      pointers_(values_.size()) {
  point();
}

KernelParams::KernelParams(const KernelParams &other)
    : ranks_(other.ranks_), numScalars_(other.numScalars_), mapScalars_(other.mapScalars_),
      mapAddresses_(other.mapAddresses_), values_(other.values_), scratch_(other.scratch_.size()),
      pointers_(other.pointers_.size()) {
  point();
}

KernelParams &KernelParams::operator=(const KernelParams &other) {
  if (this != &other) {
    ranks_ = other.ranks_;
    numScalars_ = other.numScalars_;
    mapScalars_ = other.mapScalars_;
    mapAddresses_ = other.mapAddresses_;
    values_ = other.values_;
    scratch_.resize(values_.size());
    pointers_.resize(values_.size());
    point();
  }
  return *this;
}

void KernelParams::point() {
  for (size_t i = 0; i < values_.size(); ++i)
    pointers_[i] = &values_[i];
}

void KernelParams::mapTensorMaps(const std::vector<artifact::ScalarKind> &kinds,
                                 std::vector<uint64_t> addresses) {
  if (kinds.size() != numScalars_)
    throw std::logic_error("kernel parameters: " + std::to_string(kinds.size()) +
                           " scalar kinds for " + std::to_string(numScalars_) + " scalars");
  mapScalars_.clear();
  for (size_t s = 0; s < kinds.size(); ++s)
    if (kinds[s] == artifact::ScalarKind::TensorMap)
      mapScalars_.push_back(s);
  mapAddresses_ = std::move(addresses);
}

bool KernelParams::pack(const BufferArgument *buffers, const int64_t *scalars) {
  for (size_t b = 0; b < ranks_.size(); ++b)
    if (buffers[b].rank != ranks_[b])
      throw std::logic_error("kernel parameters: buffer " + std::to_string(b) + " has rank " +
                             std::to_string(buffers[b].rank) + ", prepared for " +
                             std::to_string(ranks_[b]));
  packKernelParams(buffers, ranks_.size(), scalars, numScalars_, scratch_.data());
  // The scalars come last.
  uint64_t *scalarValues = scratch_.data() + scratch_.size() - numScalars_;
  for (size_t s : mapScalars_) {
    const int64_t index = scalars[s];
    if (index < 0 || static_cast<uint64_t>(index) >= mapAddresses_.size())
      throw std::logic_error("kernel parameters: scalar " + std::to_string(s) +
                             " names tensor map " + std::to_string(index) + " of " +
                             std::to_string(mapAddresses_.size()));
    scalarValues[s] = mapAddresses_[static_cast<size_t>(index)];
  }
  if (std::equal(scratch_.begin(), scratch_.end(), values_.begin()))
    return false;
  // Copied in place: pointers() stays valid.
  std::copy(scratch_.begin(), scratch_.end(), values_.begin());
  return true;
}

} // namespace kiln::gpu
