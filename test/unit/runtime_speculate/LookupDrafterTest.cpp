// Drafting by lookup: what the drafter proposes on sequences small enough to
// follow by hand, and on a code-edit replay (a file given in the prompt,
// then rewritten with small changes) how many drafted tokens a greedy
// verifier would accept a step.
#include "runtime/speculate/LookupDrafter.h"

#include <gtest/gtest.h>

#include <random>
#include <stdexcept>

namespace kiln::speculate {
namespace {

using Tokens = std::vector<int32_t>;

LookupDrafter drafterOf(const Tokens &tokens, LookupOptions options = {}) {
  LookupDrafter drafter(options);
  drafter.append(tokens);
  return drafter;
}

TEST(LookupDrafterTest, ProposesWhatFollowedTheSuffixBefore) {
  EXPECT_EQ(drafterOf({1, 2, 3, 4, 5, 6, 9, 1, 2, 3}).draft(), (Tokens{4, 5, 6, 9, 1, 2, 3}));
  // The latest earlier occurrence wins.
  EXPECT_EQ(drafterOf({7, 8, 1, 9, 9, 7, 8, 2, 5, 7, 8}).draft(), (Tokens{2, 5, 7, 8}));
  // The longest suffix wins: (5, 7, 8) occurred once, (7, 8) later.
  EXPECT_EQ(drafterOf({5, 7, 8, 1, 2, 6, 7, 8, 3, 5, 7, 8}).draft(),
            (Tokens{1, 2, 6, 7, 8, 3, 5, 7}));
  // Nothing to match: too short, or never seen.
  EXPECT_TRUE(drafterOf({1}).draft().empty());
  EXPECT_TRUE(drafterOf({1, 2, 3, 4, 5}).draft().empty());
  // At most maxDraft tokens.
  LookupOptions two;
  two.maxDraft = 2;
  EXPECT_EQ(drafterOf({1, 2, 3, 4, 5, 1, 2}, two).draft(), (Tokens{3, 4}));
}

TEST(LookupDrafterTest, GrowsStepByStepAndResets) {
  LookupDrafter drafter;
  drafter.append({4, 5, 6, 7});
  drafter.append(4);
  EXPECT_TRUE(drafter.draft().empty()); // minNgram 2: one token is not a match
  drafter.append(5);
  EXPECT_EQ(drafter.draft(), (Tokens{6, 7, 4, 5}));
  drafter.reset();
  EXPECT_TRUE(drafter.tokens().empty());
  EXPECT_TRUE(drafter.draft().empty());
  EXPECT_THROW(LookupDrafter({3, 2, 8}), std::invalid_argument);
  EXPECT_THROW(LookupDrafter({1, 4, 0}), std::invalid_argument);
}

TEST(LookupDrafterTest, ACodeEditReplayAcceptsSeveralTokensAStep) {
  // A "file" of 600 tokens in the prompt; the reply is the file again with
  // a changed token every 50. A greedy verifier accepts the draft's longest
  // prefix that matches the reply, plus its own token.
  std::mt19937 random(3);
  Tokens file(600);
  for (int32_t &token : file)
    token = static_cast<int32_t>(random() % 5000);
  Tokens reply = file;
  for (size_t i = 25; i < reply.size(); i += 50)
    reply[i] = static_cast<int32_t>(5000 + i);
  LookupDrafter drafter;
  drafter.append(Tokens{1, 2, 3}); // an instruction
  drafter.append(file);
  drafter.append(Tokens{9, 9}); // "rewrite it:"
  size_t done = 0, steps = 0;
  while (done < reply.size()) {
    const Tokens draft = drafter.draft();
    size_t accepted = 0;
    while (accepted < draft.size() && done + accepted < reply.size() &&
           draft[accepted] == reply[done + accepted])
      ++accepted;
    // The verify step's own token follows the accepted ones.
    const size_t step = std::min(accepted + 1, reply.size() - done);
    drafter.append(Tokens(reply.begin() + static_cast<std::ptrdiff_t>(done),
                          reply.begin() + static_cast<std::ptrdiff_t>(done + step)));
    done += step;
    ++steps;
  }
  const double perStep = static_cast<double>(reply.size()) / static_cast<double>(steps);
  EXPECT_GT(perStep, 5.0) << steps << " steps for " << reply.size() << " tokens";
}

} // namespace
} // namespace kiln::speculate
