// What cuTensorMapEncodeTiled is given for a tensor map over one call's
// buffer (runtime/cuda/TensorMap.h), without a driver: dimensions innermost
// first, byte strides of the outer ones, the box, the swizzle's enum, and a
// one-line error for each element type, box or buffer a map cannot take.
#include "runtime/cuda/TensorMap.h"

#include "runtime/cpu/RuntimeError.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::cuda {
namespace {

constexpr const char *kWhere = "gpu.kiln: entry point 'decode', steps[2]: tensor_maps[0]";

BufferArgument buffer(DeviceAddress address, std::vector<int64_t> sizes) {
  BufferArgument argument;
  argument.address = address;
  argument.rank = static_cast<int>(sizes.size());
  for (size_t d = 0; d < sizes.size(); ++d)
    argument.sizes[d] = sizes[d];
  return argument;
}

// The message of the RuntimeError encodeTensorMap throws.
std::string encodeError(const TensorMapSpec &spec, const BufferArgument &argument) {
  try {
    encodeTensorMap(spec, argument, kWhere);
  } catch (const RuntimeError &error) {
    return error.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

std::string expected(const std::string &reason) { return std::string(kWhere) + ": " + reason; }

template <typename T, size_t N> std::vector<T> first(const T (&values)[N], size_t count) {
  return std::vector<T>(values, values + count);
}

TEST(TensorMapTest, AWeightTileWith128ByteSwizzle) {
  // A bf16 [100, 4096] matrix read in boxes of 128 rows of 64 columns (128
  // bytes: one swizzle span).
  const TensorMapSpec spec{1, DType::BF16, {64, 128}, 128};
  const TensorMapEncoding e = encodeTensorMap(spec, buffer(0x7f0000200000, {100, 4096}), kWhere);
  EXPECT_EQ(e.dataType, kTensorMapBfloat16);
  EXPECT_EQ(e.dataType, 9);
  EXPECT_EQ(e.rank, 2u);
  EXPECT_EQ(e.globalAddress, 0x7f0000200000u);
  EXPECT_EQ(first(e.globalDim, 2), (std::vector<uint64_t>{4096, 100}));
  EXPECT_EQ(first(e.globalStrides, 1), (std::vector<uint64_t>{8192}));
  EXPECT_EQ(first(e.boxDim, 2), (std::vector<uint32_t>{64, 128}));
  EXPECT_EQ(first(e.elementStrides, 2), (std::vector<uint32_t>{1, 1}));
  EXPECT_EQ(e.interleave, 0);
  EXPECT_EQ(e.swizzle, 3);     // CU_TENSOR_MAP_SWIZZLE_128B
  EXPECT_EQ(e.l2Promotion, 2); // CU_TENSOR_MAP_L2_PROMOTION_L2_128B
  EXPECT_EQ(e.oobFill, 0);     // zeros
}

TEST(TensorMapTest, DimensionsAreTheSizesReversed) {
  // An f32 KV cache [slots 16, 2 heads, 32]: strides of 128 and 256 bytes.
  const TensorMapEncoding kv =
      encodeTensorMap({0, DType::F32, {32, 2, 8}, 0}, buffer(0x1000, {16, 2, 32}), kWhere);
  EXPECT_EQ(kv.dataType, kTensorMapFloat32);
  EXPECT_EQ(kv.rank, 3u);
  EXPECT_EQ(first(kv.globalDim, 3), (std::vector<uint64_t>{32, 2, 16}));
  EXPECT_EQ(first(kv.globalStrides, 2), (std::vector<uint64_t>{128, 256}));
  EXPECT_EQ(first(kv.boxDim, 3), (std::vector<uint32_t>{32, 2, 8}));
  EXPECT_EQ(kv.swizzle, kTensorMapSwizzleNone);

  // Rank 1: no strides at all.
  const TensorMapEncoding row =
      encodeTensorMap({0, DType::F16, {256}, 0}, buffer(0x2000, {1000}), kWhere);
  EXPECT_EQ(row.dataType, kTensorMapFloat16);
  EXPECT_EQ(row.rank, 1u);
  EXPECT_EQ(row.globalDim[0], 1000u);
  EXPECT_EQ(row.globalStrides[0], 0u);

  // Rank 5, the most; the 32- and 64-byte swizzles.
  const TensorMapEncoding five = encodeTensorMap({0, DType::BF16, {16, 1, 1, 2, 4}, 32},
                                                 buffer(0x3000, {4, 3, 2, 5, 16}), kWhere);
  EXPECT_EQ(first(five.globalDim, 5), (std::vector<uint64_t>{16, 5, 2, 3, 4}));
  EXPECT_EQ(first(five.globalStrides, 4), (std::vector<uint64_t>{32, 160, 320, 960}));
  EXPECT_EQ(five.swizzle, kTensorMapSwizzle32B);
  EXPECT_EQ(encodeTensorMap({0, DType::F32, {16, 1}, 64}, buffer(0x3000, {3, 16}), kWhere).swizzle,
            kTensorMapSwizzle64B);
}

TEST(TensorMapTest, RefusesWhatTheMapCannotTake) {
  const BufferArgument matrix = buffer(0x1000, {64, 64});
  EXPECT_EQ(encodeError({0, DType::I32, {16, 16}, 0}, matrix),
            expected("a tensor map of I32 elements (it takes BF16, F16 or F32)"));
  EXPECT_EQ(encodeError({0, DType::BF16, {64}, 0}, matrix),
            expected("a box of 1 sides for a rank-2 buffer (one per dimension, innermost first)"));
  EXPECT_EQ(encodeError({0, DType::BF16, {64, 0}, 0}, matrix),
            expected("box side 1 of 0 elements (1..256)"));
  EXPECT_EQ(encodeError({0, DType::BF16, {512, 8}, 0}, matrix),
            expected("box side 0 of 512 elements (1..256)"));
  EXPECT_EQ(encodeError({0, DType::BF16, {12, 8}, 0}, matrix),
            expected("the box's rows of 12 BF16 are 24 bytes, not a multiple of 16"));
  EXPECT_EQ(encodeError({0, DType::BF16, {64, 8}, 16}, matrix),
            expected("a swizzle of 16 bytes (it takes 0, 32, 64 or 128)"));
  EXPECT_EQ(encodeError({0, DType::F32, {64, 8}, 128}, matrix),
            expected("the box's rows of 64 F32 are 256 bytes, more than the 128-byte swizzle "
                     "span"));
  EXPECT_EQ(
      encodeError({0, DType::BF16, {8, 1, 1, 1, 1, 1}, 0}, buffer(0x1000, {1, 1, 1, 1, 1, 8})),
      expected("a tensor map of a rank-6 buffer (it takes ranks 1..5)"));
}

TEST(TensorMapTest, RefusesACallTheMapCannotTake) {
  const TensorMapSpec spec{0, DType::BF16, {8, 4}, 0};
  EXPECT_EQ(encodeError(spec, buffer(0x1008, {64, 64})),
            expected("the buffer's address 0x1008 is not 16-byte aligned"));
  EXPECT_EQ(encodeError(spec, buffer(0x1000, {0, 64})),
            expected("dimension 0 of the buffer has 0 elements (a tensor map takes 1..2^32)"));
  EXPECT_EQ(encodeError(spec, buffer(0x1000, {4, (int64_t{1} << 32) + 1})),
            expected("dimension 1 of the buffer has 4294967297 elements (a tensor map takes "
                     "1..2^32)"));
  // Rows of 12 bf16: 24 bytes apart.
  EXPECT_EQ(encodeError(spec, buffer(0x1000, {4, 12})),
            expected("dimension 0 of the buffer has a stride of 24 bytes (a tensor map takes "
                     "multiples of 16 below 2^40)"));
  EXPECT_EQ(encodeError({0, DType::F32, {4, 1, 1}, 0},
                        buffer(0x1000, {2, int64_t{1} << 20, int64_t{1} << 20})),
            expected("dimension 0 of the buffer has a stride of 4398046511104 bytes (a tensor "
                     "map takes multiples of 16 below 2^40)"));
  // A stride past 2^64 bytes does not wrap around into an accepted one
  // (2^70 would wrap to 64).
  EXPECT_EQ(encodeError({0, DType::F32, {4, 1, 1, 1}, 0},
                        buffer(0x1000, {2, int64_t{1} << 32, int64_t{1} << 32, 16})),
            expected("dimension 0 of the buffer has a stride of 2^64 or more bytes (a tensor "
                     "map takes multiples of 16 below 2^40)"));
}

TEST(TensorMapTest, SpecChecksNeedNoCall) {
  EXPECT_NO_THROW(checkTensorMapSpec({0, DType::BF16, {64, 128}, 128}, 2, kWhere));
  try {
    checkTensorMapSpec({0, DType::BF16, {64, 128}, 128}, 3, kWhere);
    ADD_FAILURE() << "nothing thrown";
  } catch (const RuntimeError &error) {
    EXPECT_EQ(std::string(error.what()),
              expected("a box of 2 sides for a rank-3 buffer (one per dimension, innermost "
                       "first)"));
  }
}

} // namespace
} // namespace kiln::cuda
