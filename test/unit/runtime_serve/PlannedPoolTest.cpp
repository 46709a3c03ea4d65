#include "runtime/serve/PlannedPool.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace kiln::serve {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20, kGiB = uint64_t{1} << 30;

// One rank of 1 GiB of weights, planned for 2 GiB with 0.5 GiB reserved:
// 0.5 GiB of global KV at 4096 bytes a position, pages of 64 positions
// (256 KiB): 2048 pages, less the runtime's scratch page.
ArtifactMemory memory() {
  ArtifactMemory m;
  m.weightBytes = kGiB;
  m.globalKvBytesPerToken = 4096;
  m.pageTokens = 64;
  m.conversations = 2;
  m.plannedDeviceBytes = 2 * kGiB;
  m.plannedReserveBytes = kGiB / 2;
  return m;
}

TEST(PlannedPoolTest, NoneWithoutPagesOrAPlan) {
  ArtifactMemory unpaged = memory();
  unpaged.pageTokens = 0;
  EXPECT_FALSE(plannedPool(unpaged, 1 << 20, 0, true));
  ArtifactMemory unplanned = memory();
  unplanned.plannedDeviceBytes = 0;
  EXPECT_FALSE(plannedPool(unplanned, 1 << 20, 0, true));
}

TEST(PlannedPoolTest, ThePagesThePlanLeaves) {
  const auto pool = plannedPool(memory(), 1 << 20, 8, true);
  ASSERT_TRUE(pool);
  EXPECT_EQ(pool->pages, 2047);
  EXPECT_EQ(pool->source, "by the memory plan for 2.00 GiB a device, 0.50 GiB reserved, 0.00 GiB "
                          "of saved histories' rings");
}

TEST(PlannedPoolTest, LessTheSavedHistoriesRings) {
  ArtifactMemory m = memory();
  m.slidingKvBytes = 2 * 16 * kMiB;  // 16 MiB of rings a conversation
  m.weightBytes -= m.slidingKvBytes; // the same room left for KV
  // 8 saved histories copy 128 MiB of rings: 512 pages fewer.
  EXPECT_EQ(plannedPool(m, 1 << 20, 8, true)->pages, 2047 - 512);
  // Without prefix reuse nothing is saved.
  EXPECT_EQ(plannedPool(m, 1 << 20, 8, false)->pages, 2047);
}

TEST(PlannedPoolTest, NoMoreThanTheSlotsAndSavedHistoriesHold) {
  // Contexts of 4096 positions: 64 pages each, for 2 slots and 6 saved.
  const auto pool = plannedPool(memory(), 4096, 6, true);
  EXPECT_EQ(pool->pages, 8 * 64);
  EXPECT_NE(pool->source.find("at most the slots' and saved histories' whole contexts"),
            std::string::npos);
  EXPECT_EQ(plannedPool(memory(), 4096, 6, false)->pages, 2 * 64);
}

TEST(PlannedPoolTest, NoRoomIsAnError) {
  ArtifactMemory m = memory();
  m.slidingKvBytes = 2 * 16 * kMiB;
  try {
    plannedPool(m, 1 << 20, 1000, true);
    FAIL() << "1000 saved histories' rings (16 GiB) fit a 2 GiB device";
  } catch (const std::runtime_error &error) {
    EXPECT_STREQ(error.what(),
                 "the memory plan for 2.00 GiB a device, 0.50 GiB reserved, 15.62 GiB of saved "
                 "histories' rings leaves no room for a KV page: give --kv-pages or --kv-memory, "
                 "fewer --saved-histories, or compile with a larger --device-memory");
  }
}

TEST(PlannedPoolTest, SavedHistoriesByDefault) {
  // Without a plan (or pages), 4 a slot.
  ArtifactMemory unplanned = memory();
  unplanned.plannedDeviceBytes = 0;
  EXPECT_EQ(defaultSavedHistories(unplanned), 8);
  // Pages without rings to copy: 64 a slot.
  EXPECT_EQ(defaultSavedHistories(memory()), 128);
  // 2047 pages of 256 KiB leave an eighth of about 64 MiB: 63 copies of a
  // 1 MiB ring.
  ArtifactMemory rings = memory();
  rings.slidingKvBytes = 2 * kMiB;
  rings.weightBytes -= rings.slidingKvBytes;
  EXPECT_EQ(defaultSavedHistories(rings), 63);
  // Rings of 16 MiB: 3 fit, but 4 a slot is the least.
  rings.slidingKvBytes = 2 * 16 * kMiB;
  rings.weightBytes = kGiB - rings.slidingKvBytes;
  EXPECT_EQ(defaultSavedHistories(rings), 8);
  // Rings of 64 KiB: 1023, but 64 a slot is the most.
  rings.slidingKvBytes = 2 * 64 * 1024;
  rings.weightBytes = kGiB - rings.slidingKvBytes;
  EXPECT_EQ(defaultSavedHistories(rings), 128);
  // And what the default takes still fits the plan.
  rings.slidingKvBytes = 2 * kMiB;
  rings.weightBytes = kGiB - rings.slidingKvBytes;
  EXPECT_GT(plannedPool(rings, 1 << 20, defaultSavedHistories(rings), true)->pages, 0);
}

} // namespace
} // namespace kiln::serve
