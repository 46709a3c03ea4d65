// KV caches: slot counts for global and sliding layers, K/V buffer numbering,
// sizes, alignment and the per-token accounting.
#include "runtime/engine/KvCache.h"

#include "runtime/cpu/RuntimeError.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

// The tiny model's layout: layers 0..2 sliding (window 8), layer 3 global.
std::vector<KvCacheSpec> tinySpecs() {
  std::vector<KvCacheSpec> specs;
  for (uint32_t layer = 0; layer < 4; ++layer)
    specs.push_back({layer, layer == 3 ? 0u : 8u, 2, 32, DType::BF16});
  return specs;
}

TEST(KvCache, SlotsPerKind) {
  KvCaches caches(tinySpecs(), 100);
  ASSERT_EQ(caches.numCaches(), 4u);
  ASSERT_EQ(caches.numBuffers(), 8u);
  EXPECT_EQ(caches.contextLength(), 100);
  EXPECT_EQ(caches.slots(0), 8);
  EXPECT_EQ(caches.slots(2), 8);
  EXPECT_EQ(caches.slots(3), 100);
  // Buffer 2c is K of cache c, 2c+1 its V: [slots, 2, 32] bf16.
  EXPECT_EQ(caches.bufferBytes(0), 8u * 2 * 32 * 2);
  EXPECT_EQ(caches.bufferBytes(1), 8u * 2 * 32 * 2);
  EXPECT_EQ(caches.bufferBytes(6), 100u * 2 * 32 * 2);
  EXPECT_EQ(caches.bufferBytes(7), 100u * 2 * 32 * 2);
  EXPECT_NE(caches.buffer(6), caches.buffer(7));
  EXPECT_EQ(caches.totalBytes(), 6u * 1024 + 2u * 12800);
}

TEST(KvCache, AlignedAndZeroed) {
  KvCaches caches(tinySpecs(), 5000); // global buffers take the mmap path
  for (size_t i = 0; i < caches.numBuffers(); ++i) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(caches.buffer(i)) % 64, 0u) << i;
    for (size_t b = 0; b < caches.bufferBytes(i); b += 97)
      ASSERT_EQ(caches.buffer(i)[b], 0);
  }
  caches.buffer(7)[3] = 9;
  caches.clear();
  EXPECT_EQ(caches.buffer(7)[3], 0);
}

TEST(KvCache, BytesPerToken) {
  KvCaches caches(tinySpecs(), 64);
  // One global layer: K and V, 2 heads x 32 x bf16.
  EXPECT_EQ(caches.globalBytesPerToken(), 2u * 2 * 32 * 2);
  EXPECT_EQ(caches.slidingBytesPerToken(), 3u * 2 * 2 * 32 * 2);
}

// The model card's figure: 16 global layers, 8 KV heads of 128, bf16 =
// 64 KiB per token.
TEST(KvCache, FullModelGlobalBytesPerToken) {
  std::vector<KvCacheSpec> specs;
  for (uint32_t layer = 0; layer < 62; ++layer)
    specs.push_back({layer, (61 - layer) % 4 == 0 ? 0u : 2048u, 8, 128, DType::BF16});
  KvCaches caches(specs, 16);
  EXPECT_EQ(caches.globalBytesPerToken(), 64u * 1024);
}

// A verify entry's rollback room: the ring holds window + N - 1 slots.
TEST(KvCache, RingBeyondTheWindow) {
  const KvCacheSpec sliding{1, 8, 2, 16, DType::BF16, 15};
  EXPECT_EQ(kvCacheSlots(sliding, 4096), 15);
  EXPECT_EQ(kvCacheBufferBytes(sliding, 4096), 15u * 2 * 16 * 2);
  const KvCacheSpec global{0, 0, 2, 16, DType::BF16, 0};
  EXPECT_EQ(kvCacheSlots(global, 4096), 4096);
}

TEST(KvCache, F32Cache) {
  KvCaches caches({{0, 0, 1, 4, DType::F32}}, 3);
  EXPECT_EQ(caches.bufferBytes(0), 3u * 4 * 4);
}

TEST(KvCache, Errors) {
  EXPECT_THROW(KvCaches(tinySpecs(), 0), RuntimeError);
  try {
    KvCaches({{5, 0, 0, 32, DType::BF16}}, 10);
    FAIL();
  } catch (const RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("layer 5"), std::string::npos);
  }
}

TEST(KvCache, Empty) {
  KvCaches caches({}, 10);
  EXPECT_EQ(caches.numBuffers(), 0u);
  EXPECT_EQ(caches.totalBytes(), 0u);
}

} // namespace
} // namespace kiln
