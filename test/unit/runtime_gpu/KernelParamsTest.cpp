// The parameters of an nvptx launch against docs/runtime-abi.md: each memref
// expanded into (allocated, aligned, offset, sizes[R], strides[R]), the
// fields of the CPU's memref descriptor in the same order, then the i64
// scalars; every parameter 8 bytes, cuLaunchKernel's array pointing at each.
#include "runtime/gpu/KernelParams.h"

#include <gtest/gtest.h>

#include <cstring>

namespace kiln::gpu {
namespace {

BufferArgument buffer(DeviceAddress address, std::vector<int64_t> sizes) {
  BufferArgument argument;
  argument.address = address;
  argument.rank = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d)
    argument.sizes[d] = sizes[d];
  return argument;
}

TEST(KernelParamsTest, CountIsThreePlusTwoRankPerBufferPlusScalars) {
  EXPECT_EQ(kernelParamCount({}, 0), 0u);
  EXPECT_EQ(kernelParamCount({1}, 0), 5u);
  EXPECT_EQ(kernelParamCount({1, 2, 3}, 2), 5u + 7u + 9u + 2u);
  EXPECT_EQ(kernelParamCount({6}, 1), 16u);
}

TEST(KernelParamsTest, PacksExpandedDescriptorsThenScalars) {
  // A KV cache [slots 16, 2 heads, 32], the logits [1, 1024], token ids [5].
  const BufferArgument buffers[] = {buffer(0x7f0000001000, {16, 2, 32}),
                                    buffer(0x7f0000200000, {1, 1024}), buffer(0x7f0000300040, {5})};
  const int64_t scalars[] = {5, 37, -1};
  std::vector<uint64_t> values(kernelParamCount({3, 2, 1}, 3));
  packKernelParams(buffers, 3, scalars, 3, values.data());
  const std::vector<uint64_t> expected = {
      // allocated, aligned, offset, sizes, strides (elements, row-major)
      0x7f0000001000, 0x7f0000001000, 0, 16, 2, 32, 64, 32, 1, 0x7f0000200000, 0x7f0000200000, 0, 1,
      1024, 1024, 1, 0x7f0000300040, 0x7f0000300040, 0, 5, 1,
      // the scalars, as i64
      5, 37, static_cast<uint64_t>(int64_t{-1})};
  EXPECT_EQ(values, expected);
}

TEST(KernelParamsTest, FieldsAreTheCpuDescriptorsInOrder) {
  // The GPU expansion of a memref is the CPU descriptor's bytes, one 8-byte
  // parameter per field.
  for (int rank = memref::kMinRank; rank <= memref::kMaxRank; ++rank) {
    std::vector<int64_t> sizes;
    for (int d = 0; d < rank; ++d)
      sizes.push_back(3 + 2 * d);
    alignas(8) static unsigned char base[64];
    const BufferArgument argument = buffer(reinterpret_cast<uintptr_t>(base), sizes);
    std::vector<uint64_t> values(kernelParamCount({rank}, 0));
    packKernelParams(&argument, 1, nullptr, 0, values.data());
    memref::DescriptorStorage storage;
    void *descriptor = memref::buildDescriptor(storage, base, sizes.data(), rank);
    ASSERT_EQ(values.size() * 8, 24u + 16u * rank);
    EXPECT_EQ(std::memcmp(values.data(), descriptor, values.size() * 8), 0) << "rank " << rank;
  }
}

TEST(KernelParamsTest, PointersAddressTheValuesAndPackReportsChanges) {
  KernelParams params({2}, 2);
  ASSERT_EQ(params.size(), 9u);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(params.pointers()[i], &params.values()[i]);

  const BufferArgument x = buffer(0x1000, {4, 8});
  int64_t scalars[] = {4, 10};
  EXPECT_TRUE(params.pack(&x, scalars));
  EXPECT_EQ(*static_cast<uint64_t *>(params.pointers()[1]), 0x1000u);
  EXPECT_EQ(*static_cast<uint64_t *>(params.pointers()[8]), 10u);
  EXPECT_FALSE(params.pack(&x, scalars)); // the same arguments
  scalars[1] = 11;                        // PastTokens moved on
  EXPECT_TRUE(params.pack(&x, scalars));
  EXPECT_EQ(*static_cast<uint64_t *>(params.pointers()[8]), 11u);

  // A copy holds the same values behind its own pointers.
  KernelParams copy = params;
  EXPECT_EQ(copy.values(), params.values());
  for (size_t i = 0; i < copy.size(); ++i)
    EXPECT_EQ(copy.pointers()[i], &copy.values()[i]);
  scalars[1] = 12;
  EXPECT_TRUE(copy.pack(&x, scalars));
  EXPECT_EQ(params.values()[8], 11u);
  EXPECT_EQ(copy.values()[8], 12u);
}

TEST(KernelParamsTest, TensorMapScalarsBecomeTheirMapsAddresses) {
  // Tokens, then two tensor maps in the order the scalars name them.
  using fb = artifact::ScalarKind;
  KernelParams params({2}, 3);
  params.mapTensorMaps({fb::Tokens, fb::TensorMap, fb::TensorMap}, {0x7f00000a000, 0x7f00000a080});
  const BufferArgument x = buffer(0x1000, {4, 8});
  int64_t scalars[] = {4, 1, 0};
  EXPECT_TRUE(params.pack(&x, scalars));
  // The descriptor's 7 values, then the scalars.
  EXPECT_EQ(params.values()[7], 4u);
  EXPECT_EQ(params.values()[8], 0x7f00000a080u);
  EXPECT_EQ(params.values()[9], 0x7f00000a000u);
  EXPECT_FALSE(params.pack(&x, scalars));
  // A copy (a graph's node) substitutes the same addresses.
  KernelParams copy = params;
  EXPECT_FALSE(copy.pack(&x, scalars));
  EXPECT_EQ(copy.values()[8], 0x7f00000a080u);

  scalars[2] = 2; // no third map
  EXPECT_THROW(params.pack(&x, scalars), std::logic_error);
  EXPECT_THROW(params.mapTensorMaps({fb::TensorMap}, {0x1000}), std::logic_error);
}

TEST(KernelParamsTest, RefusesABufferOfAnotherRank) {
  KernelParams params({2}, 0);
  const BufferArgument x = buffer(0x1000, {4, 8, 2});
  EXPECT_THROW(params.pack(&x, nullptr), std::logic_error);
}

} // namespace
} // namespace kiln::gpu
