// Memref descriptors: MLIR's layout for every rank 1..6, row-major strides.
#include "runtime/cpu/MemRef.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::memref {
namespace {

// The descriptor as the kernel sees it: 64-bit words.
std::vector<int64_t> words(const void *descriptor, int rank) {
  const auto *begin = static_cast<const int64_t *>(descriptor);
  return std::vector<int64_t>(begin, begin + 3 + 2 * rank);
}

TEST(MemRef, LayoutMatchesMlir) {
  EXPECT_EQ(sizeof(Descriptor<1>), 40u);
  EXPECT_EQ(sizeof(Descriptor<2>), 56u);
  EXPECT_EQ(sizeof(Descriptor<6>), 120u);
  EXPECT_EQ(offsetof(Descriptor<4>, strides), 24u + 32u);
  EXPECT_GE(sizeof(DescriptorStorage), sizeof(Descriptor<kMaxRank>));
}

TEST(MemRef, RankThreeRowMajor) {
  float buffer[2 * 3 * 4];
  DescriptorStorage storage;
  const int64_t sizes[] = {2, 3, 4};
  void *arg = buildDescriptor(storage, buffer, sizes, 3);
  ASSERT_EQ(arg, static_cast<void *>(storage.bytes));
  const auto *descriptor = static_cast<Descriptor<3> *>(arg);
  EXPECT_EQ(descriptor->allocated, buffer);
  EXPECT_EQ(descriptor->aligned, buffer);
  EXPECT_EQ(descriptor->offset, 0);
  EXPECT_EQ(descriptor->sizes[0], 2);
  EXPECT_EQ(descriptor->sizes[2], 4);
  EXPECT_EQ(descriptor->strides[0], 12);
  EXPECT_EQ(descriptor->strides[1], 4);
  EXPECT_EQ(descriptor->strides[2], 1);
  const auto raw = words(arg, 3);
  EXPECT_EQ(raw[0], reinterpret_cast<int64_t>(buffer));
  EXPECT_EQ(raw[1], reinterpret_cast<int64_t>(buffer));
  EXPECT_EQ(std::vector<int64_t>(raw.begin() + 2, raw.end()),
            (std::vector<int64_t>{0, 2, 3, 4, 12, 4, 1}));
}

TEST(MemRef, EveryRank) {
  const int64_t sizes[] = {2, 3, 4, 5, 6, 7};
  char base;
  for (int rank = kMinRank; rank <= kMaxRank; ++rank) {
    DescriptorStorage storage;
    void *arg = buildDescriptor(storage, &base, sizes, rank);
    ASSERT_NE(arg, nullptr) << rank;
    const auto raw = words(arg, rank);
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; --i) {
      EXPECT_EQ(raw[3 + i], sizes[i]) << "rank " << rank << " dim " << i;
      EXPECT_EQ(raw[3 + rank + i], stride) << "rank " << rank << " dim " << i;
      stride *= sizes[i];
    }
  }
}

TEST(MemRef, RankOneAndZeroSizes) {
  DescriptorStorage storage;
  const int64_t sizes[] = {0, 5};
  auto *descriptor = static_cast<Descriptor<2> *>(buildDescriptor(storage, nullptr, sizes, 2));
  EXPECT_EQ(descriptor->strides[0], 5);
  EXPECT_EQ(descriptor->strides[1], 1);
  const int64_t one[] = {9};
  auto *vector = static_cast<Descriptor<1> *>(buildDescriptor(storage, nullptr, one, 1));
  EXPECT_EQ(vector->sizes[0], 9);
  EXPECT_EQ(vector->strides[0], 1);
}

TEST(MemRef, UnsupportedRanks) {
  DescriptorStorage storage;
  const int64_t sizes[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  EXPECT_EQ(buildDescriptor(storage, nullptr, sizes, 0), nullptr);
  EXPECT_EQ(buildDescriptor(storage, nullptr, sizes, 7), nullptr);
  EXPECT_EQ(buildDescriptor(storage, nullptr, sizes, -1), nullptr);
}

} // namespace
} // namespace kiln::memref
