// PrefixTree: the radix tree over cached histories' token pages that
// kiln-serve's admission asks for the history sharing the longest prefix
// with a prompt.
#include "runtime/serve/PrefixTree.h"
#include "runtime/cpu/RuntimeError.h"

#include <gtest/gtest.h>

#include <numeric>
#include <random>

namespace kiln::serve {
namespace {

using Tokens = std::vector<int32_t>;

Tokens range(int32_t first, int32_t count) {
  Tokens tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

Tokens join(Tokens a, const Tokens &b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// What the tree must answer, by comparing every history with the prompt.
std::vector<PrefixTree::Match> byScan(const std::map<int64_t, Tokens> &histories,
                                      const Tokens &prompt) {
  std::vector<PrefixTree::Match> out;
  for (const auto &[id, tokens] : histories) {
    int64_t n = 0;
    while (n < static_cast<int64_t>(std::min(tokens.size(), prompt.size())) &&
           tokens[static_cast<size_t>(n)] == prompt[static_cast<size_t>(n)])
      ++n;
    if (n > 0)
      out.push_back({id, n});
  }
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &b) {
    return a.shared != b.shared ? a.shared > b.shared : a.id < b.id;
  });
  return out;
}

void expectMatches(const std::vector<PrefixTree::Match> &got,
                   const std::vector<PrefixTree::Match> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].id, want[i].id) << "match " << i;
    EXPECT_EQ(got[i].shared, want[i].shared) << "match " << i;
  }
}

TEST(PrefixTreeTest, FindsEveryHistorySharingAPrefixLongestFirst) {
  PrefixTree tree(4);
  const Tokens system = range(100, 10);       // two pages and a half
  tree.insert(1, join(system, range(1, 7)));  // a session
  tree.insert(2, join(system, range(50, 3))); // another
  tree.insert(-3, system);                    // the shared prefix, saved
  tree.insert(4, range(7, 2));                // shorter than a page
  // The first session's next turn: all of it, then the prefix, then the other.
  const Tokens next = join(join(system, range(1, 7)), range(9, 5));
  std::vector<PrefixTree::Match> got = tree.matches(next);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].id, 1);
  EXPECT_EQ(got[0].shared, 17);
  EXPECT_EQ(got[1].id, -3);
  EXPECT_EQ(got[1].shared, 10);
  EXPECT_EQ(got[2].id, 2);
  EXPECT_EQ(got[2].shared, 10);
  // A prompt parting inside a page: the tokens up to where it parts.
  got = tree.matches(join(range(100, 6), {0}));
  ASSERT_EQ(got.size(), 3u);
  for (const PrefixTree::Match &match : got)
    EXPECT_EQ(match.shared, 6);
  // Shorter than a page; sharing nothing.
  expectMatches(tree.matches({7, 8, 0}), {{4, 2}});
  EXPECT_TRUE(tree.matches({0, 1, 2, 3, 4}).empty());
  EXPECT_TRUE(tree.matches({}).empty());
}

TEST(PrefixTreeTest, ErasedHistoriesAndTheirNodesGo) {
  PrefixTree tree(4);
  EXPECT_EQ(tree.nodes(), 1);
  tree.insert(1, range(0, 12)); // 3 pages
  tree.insert(2, range(0, 9));  // shares 2 of them
  EXPECT_EQ(tree.nodes(), 4);
  EXPECT_THROW(tree.insert(1, range(0, 3)), RuntimeError);
  tree.erase(1);
  EXPECT_FALSE(tree.contains(1));
  EXPECT_EQ(tree.nodes(), 3);
  expectMatches(tree.matches(range(0, 12)), {{2, 9}});
  tree.erase(2);
  tree.erase(7); // unknown: nothing
  EXPECT_EQ(tree.nodes(), 1);
  EXPECT_EQ(tree.size(), 0u);
  EXPECT_TRUE(tree.matches(range(0, 12)).empty());
  EXPECT_THROW(PrefixTree(0), RuntimeError);
}

TEST(PrefixTreeTest, AgreesWithAScanOnRandomHistories) {
  // Histories growing from a few roots and branching, as sessions do; ids
  // erased and inserted again; every answer against comparing them all.
  std::mt19937 random(7);
  for (int64_t page : {1, 3, 16}) {
    PrefixTree tree(page);
    std::map<int64_t, Tokens> histories;
    for (int round = 0; round < 300; ++round) {
      const int64_t id = static_cast<int64_t>(random() % 40) - 20;
      if (histories.count(id) && random() % 3 == 0) {
        tree.erase(id);
        histories.erase(id);
        continue;
      }
      Tokens tokens;
      if (!histories.empty() && random() % 4 != 0) {
        auto from = histories.begin();
        std::advance(from, static_cast<long>(random() % histories.size()));
        tokens.assign(from->second.begin(),
                      from->second.begin() +
                          static_cast<long>(random() % (from->second.size() + 1)));
      }
      for (uint32_t extra = random() % 40; extra > 0; --extra)
        tokens.push_back(static_cast<int32_t>(random() % 5));
      tree.erase(id);
      histories[id] = tokens;
      tree.insert(id, tokens);
      Tokens prompt = histories[static_cast<int64_t>(random() % 2) ? id : histories.begin()->first];
      prompt.resize(random() % (prompt.size() + 8), 1);
      expectMatches(tree.matches(prompt), byScan(histories, prompt));
      if (HasFailure())
        return;
    }
  }
}

} // namespace
} // namespace kiln::serve
