// KvPages: the page pool and page table of paged KV caches.
#include "runtime/engine/KvPages.h"
#include "runtime/cpu/RuntimeError.h"

#include <gtest/gtest.h>

#include <set>

namespace kiln {
namespace {

TEST(KvPagesTest, AConversationTakesPagesAsItsPositionsGrow) {
  KvPages pages(16, 10, 2, 100); // 7 pages hold a context of 100
  EXPECT_TRUE(pages.paged());
  EXPECT_EQ(pages.pagesPerConversation(), 7);
  EXPECT_EQ(pages.table().size(), 14u);
  // Every entry starts at the scratch page, one past the pool.
  for (int32_t entry : pages.table())
    EXPECT_EQ(entry, 10);
  EXPECT_EQ(pages.lacking(0, 1), 1);
  EXPECT_EQ(pages.lacking(0, 33), 3);
  EXPECT_TRUE(pages.reserve(0, 33));
  EXPECT_EQ(pages.held(0), 3);
  EXPECT_EQ(pages.freePages(), 7);
  EXPECT_EQ(pages.lacking(0, 48), 0);
  EXPECT_TRUE(pages.changed());
  pages.markCopied();
  EXPECT_TRUE(pages.reserve(0, 48)); // nothing new
  EXPECT_FALSE(pages.changed());
  // A context's last page is the last it takes, however far positions go.
  EXPECT_EQ(pages.lacking(1, 1000), 7);
}

TEST(KvPagesTest, ConversationsInterleaveAndNeverShareAPage) {
  KvPages pages(16, 8, 2, 64);
  ASSERT_TRUE(pages.reserve(0, 16));
  ASSERT_TRUE(pages.reserve(1, 32));
  ASSERT_TRUE(pages.reserve(0, 40));
  const std::vector<int32_t> &table = pages.table();
  // Conversation 0: pages 0, 3 and 4; conversation 1: 1 and 2.
  EXPECT_EQ(table[0], 0);
  EXPECT_EQ(table[1], 3);
  EXPECT_EQ(table[2], 4);
  EXPECT_EQ(table[4], 1);
  EXPECT_EQ(table[5], 2);
  std::set<int32_t> held;
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < pages.held(c); ++i)
      EXPECT_TRUE(held.insert(table[static_cast<size_t>(c * 4 + i)]).second);
  EXPECT_EQ(pages.freePages(), 8 - 5);
}

TEST(KvPagesTest, AFullPoolTakesNothing) {
  KvPages pages(16, 3, 2, 64);
  ASSERT_TRUE(pages.reserve(0, 32));
  const std::vector<int32_t> before = pages.table();
  EXPECT_FALSE(pages.reserve(1, 33)); // 3 pages, 1 free
  EXPECT_EQ(pages.table(), before);
  EXPECT_EQ(pages.held(1), 0);
  EXPECT_EQ(pages.freePages(), 1);
  EXPECT_TRUE(pages.reserve(1, 16));
  EXPECT_EQ(pages.freePages(), 0);
}

TEST(KvPagesTest, ReleaseGivesBackPagesPastThePositionsKept) {
  KvPages pages(16, 8, 1, 128);
  ASSERT_TRUE(pages.reserve(0, 70)); // 5 pages
  pages.release(0, 33);              // positions 0..32 need 3
  EXPECT_EQ(pages.held(0), 3);
  EXPECT_EQ(pages.freePages(), 5);
  EXPECT_EQ(pages.table()[3], 8); // back to the scratch page
  EXPECT_EQ(pages.table()[4], 8);
  pages.release(0, 100); // keeps what it holds
  EXPECT_EQ(pages.held(0), 3);
  pages.release(0, 0);
  EXPECT_EQ(pages.held(0), 0);
  EXPECT_EQ(pages.freePages(), 8);
  // Pages given back are taken again.
  ASSERT_TRUE(pages.reserve(0, 128));
  EXPECT_EQ(pages.freePages(), 0);
}

TEST(KvPagesTest, ASharedPageGoesBackWithItsLastHolder) {
  KvPages pages(16, 6, 2, 64);
  ASSERT_TRUE(pages.reserve(0, 40)); // pages 0, 1, 2
  const std::vector<int32_t> saved = pages.share(0, 3);
  EXPECT_EQ(saved, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(pages.references(1), 2);
  // Conversation 1 takes the first two: three holders of pages 0 and 1.
  pages.adopt(1, {saved[0], saved[1]});
  EXPECT_EQ(pages.held(1), 2);
  EXPECT_EQ(pages.page(1, 1), 1);
  EXPECT_EQ(pages.references(0), 3);
  EXPECT_EQ(pages.references(2), 2);
  EXPECT_EQ(pages.freePages(), 3);
  EXPECT_THROW(pages.adopt(1, {saved[2]}), RuntimeError); // holds some already
  EXPECT_THROW(pages.page(1, 2), RuntimeError);
  // Conversation 0 gone: its pages stay with the others.
  pages.release(0, 0);
  EXPECT_EQ(pages.freePages(), 3);
  EXPECT_EQ(pages.references(2), 1);
  // Copy on write: conversation 1 gets a page of its own for page 1.
  const int32_t own = pages.replace(1, 1);
  EXPECT_EQ(own, 3);
  EXPECT_EQ(pages.page(1, 1), 3);
  EXPECT_EQ(pages.references(1), 1);
  EXPECT_EQ(pages.freePages(), 2);
  pages.drop(saved); // pages 1 and 2 now nobody's; 0 still conversation 1's
  EXPECT_EQ(pages.freePages(), 4);
  EXPECT_EQ(pages.references(0), 1);
  pages.release(1, 0);
  EXPECT_EQ(pages.freePages(), 6);
  // No free page: replace changes nothing.
  ASSERT_TRUE(pages.reserve(0, 64));
  ASSERT_TRUE(pages.reserve(1, 32));
  EXPECT_EQ(pages.replace(1, 0), -1);
  EXPECT_EQ(pages.held(1), 2);
}

TEST(KvPagesTest, DistinctCountsEachHeldPageOnceAndMissesALostHolder) {
  KvPages pages(16, 8, 2, 64);
  ASSERT_TRUE(pages.reserve(0, 40)); // pages 0, 1, 2
  const std::vector<int32_t> saved = pages.share(0, 2);
  pages.adopt(1, saved);             // conversation 1 shares pages 0 and 1
  ASSERT_TRUE(pages.reserve(1, 48)); // and takes page 3
  EXPECT_EQ(pages.distinct({&saved}), 4);
  EXPECT_EQ(pages.pages() - pages.freePages(), 4);
  // Both conversations gone: only the saved list holds pages 0 and 1.
  pages.release(0, 0);
  pages.release(1, 0);
  EXPECT_EQ(pages.distinct({&saved}), 2);
  EXPECT_EQ(pages.pages() - pages.freePages(), 2);
  // A saved list nobody counts any more (dropped from the books without
  // drop()): its pages are taken, and held by nothing counted.
  EXPECT_EQ(pages.distinct({}), 0);
  pages.drop(saved);
  EXPECT_EQ(pages.freePages(), 8);
}

TEST(KvPagesTest, RefusesEmptySizes) {
  EXPECT_THROW(KvPages(0, 8, 1, 64), RuntimeError);
  EXPECT_THROW(KvPages(16, 0, 1, 64), RuntimeError);
  EXPECT_THROW(KvPages(16, 8, 0, 64), RuntimeError);
  EXPECT_THROW(KvPages(16, 8, 1, 0), RuntimeError);
  EXPECT_FALSE(KvPages().paged());
}

} // namespace
} // namespace kiln
