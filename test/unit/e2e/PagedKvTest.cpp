// Paged KV caches (kilnc --kv-page-tokens) on this CPU: tiny compiled with
// and without pages gives the same logits, bit for bit, through a script of
// calls that makes conversations' pages interleave in the pool (chunked
// prefills, batched decode with idle rows, verify and rollback, a
// conversation forgotten and begun again); a pool too small for a call
// refuses it whole and leaves every conversation as it was; a saved
// conversation (Engine::save) restored into another slot continues exactly
// as one that computed its positions, while the one it was saved from goes
// on, and neither changes what the other reads.
#include "models/muse_spark/Config.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/EngineCall.h"
#include "test/unit/e2e/CompileForHost.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <random>

namespace kiln {
namespace {

using muse_spark::WeightFormat;
using Tokens = std::vector<int32_t>;

constexpr int64_t kConversations = 3;
constexpr int64_t kPageTokens = 16;

Artifact compile(int64_t pageTokens) {
  kernels::LowerOptions lower;
  lower.maxPrefillTokens = 16;
  lower.verifyTokens = 4;
  lower.decodeBatch = kConversations;
  lower.kvPageTokens = pageTokens;
  return Artifact::fromBytes(
      e2e::compileForHost(muse_spark::loadConfig("muse-spark-tiny"), WeightFormat::BF16, lower),
      pageTokens ? "paged" : "unpaged");
}

std::unique_ptr<Engine> load(int64_t pageTokens, int64_t pages = 0) {
  EngineOptions options;
  options.weights = "synthetic:3";
  options.contextLength = 128;
  options.threads = 1;
  options.kvPages = pages;
  return Engine::create(compile(pageTokens), options);
}

Tokens range(int32_t first, int32_t count) {
  Tokens tokens(static_cast<size_t>(count));
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

// The calls, each one's logits in `out`.
void script(Engine &engine, std::vector<std::vector<float>> &out) {
  out.push_back(engine.prefill(0, range(1, 20)));
  out.push_back(engine.prefill(1, range(40, 7)));
  out.push_back(engine.prefill(2, range(90, 35)));
  for (int step = 0; step < 12; ++step)
    out.push_back(engine.decodeBatch({int32_t(3 + step), int32_t(50 + step), int32_t(7 * step)}));
  // Conversation 1 idle for a while.
  for (int step = 0; step < 6; ++step)
    out.push_back(engine.decodeBatch({5, 5, int32_t(11 + step)}, {true, false, true}));
  out.push_back(engine.verify(0, {9, 8, 7, 6}));
  engine.rollback(0, engine.pastTokens(0) - 2);
  engine.forget(1);
  out.push_back(engine.prefill(1, range(200, 40)));
  for (int step = 0; step < 10; ++step)
    out.push_back(engine.decodeBatch({int32_t(step), int32_t(2 * step), int32_t(3 * step)}));
}

TEST(PagedKvTest, LogitsAreTheUnpagedCachesOwn) {
  std::unique_ptr<Engine> unpaged = load(0), paged = load(kPageTokens);
  EXPECT_EQ(unpaged->kvPageTokens(), 0);
  EXPECT_EQ(paged->kvPageTokens(), kPageTokens);
  // Every conversation's whole context: 3 x 128 / 16.
  EXPECT_EQ(paged->kvPages(), 24);
  std::vector<std::vector<float>> want, got;
  script(*unpaged, want);
  script(*paged, got);
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(want[i], got[i]) << "call " << i;
  // Held: conversations 0 and 1 at 50 positions, 2 at 63: 4 pages each.
  EXPECT_EQ(paged->freeKvPages(), 24 - 12);
  paged->forget(2);
  EXPECT_EQ(paged->freeKvPages(), 24 - 8);
  paged->reset();
  EXPECT_EQ(paged->freeKvPages(), 24);
}

TEST(PagedKvTest, APoolTooSmallRefusesTheCallWhole) {
  std::unique_ptr<Engine> paged = load(kPageTokens, 4), unpaged = load(0);
  EXPECT_EQ(paged->kvPages(), 4);
  paged->prefill(0, range(1, 40)); // 3 pages
  EXPECT_EQ(paged->freeKvPages(), 1);
  // 20 tokens need 2 pages: refused before the first chunk.
  try {
    paged->prefill(1, range(60, 20));
    ADD_FAILURE() << "a prompt beyond the pool ran";
  } catch (const RuntimeError &error) {
    EXPECT_NE(std::string(error.what()).find("page pool is full"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(paged->pastTokens(1), 0);
  EXPECT_EQ(paged->freeKvPages(), 1);
  paged->prefill(1, range(60, 8)); // 1 page
  EXPECT_EQ(paged->freeKvPages(), 0);
  // A batched step whose rows need a new page (conversation 0 at 48, 1 at
  // 16 after 8 steps) is refused whole too.
  for (int step = 0; step < 8; ++step)
    paged->decodeBatch({1, 2, 3}, {true, true, false});
  EXPECT_EQ(paged->pastTokens(0), 48);
  EXPECT_THROW(paged->decodeBatch({1, 2, 3}, {true, true, false}), RuntimeError);
  EXPECT_EQ(paged->pastTokens(0), 48);
  EXPECT_EQ(paged->pastTokens(1), 16);
  // Forgetting conversation 0 makes room; conversation 2 then answers as an
  // unpaged engine does.
  paged->forget(0);
  EXPECT_EQ(paged->freeKvPages(), 3);
  EXPECT_EQ(paged->prefill(2, range(5, 30)), unpaged->prefill(2, range(5, 30)));
  // Pages asked of an unpaged artifact are an error, not ignored.
  EXPECT_THROW(load(0, 4), RuntimeError);
}

TEST(PagedKvTest, ASavedConversationContinuesAsIfItHadComputedItsPositions) {
  // `engine` saves and restores; `reference` computes everything itself;
  // `follower` replays engine's calls (kiln-serve --nproc).
  std::unique_ptr<Engine> engine = load(kPageTokens), reference = load(kPageTokens),
                          follower = load(kPageTokens);
  std::vector<std::string> calls;
  engine->observeCalls([&](const EngineCall &call) { calls.push_back(encodeCall(call)); });
  ASSERT_TRUE(engine->canSave());
  EXPECT_GT(engine->savedBytes(), 0u);
  const Tokens history = range(1, 37); // two pages and 5 positions
  EXPECT_EQ(engine->prefill(0, history), reference->prefill(0, history));
  const int64_t free = engine->freeKvPages();
  const int64_t saved = engine->save(0);
  EXPECT_EQ(saved, 1);
  EXPECT_EQ(engine->savedPast(saved), 37);
  EXPECT_EQ(engine->savedKvPages(saved), 3);
  EXPECT_EQ(engine->freeKvPages(), free); // its pages shared, not copied

  // Conversation 1 continues the saved one while conversation 0 goes on,
  // past their sliding windows (8): both write into the page they share
  // with the saved one (each copies it first).
  engine->restore(1, saved, 37);
  EXPECT_EQ(engine->pastTokens(1), 37);
  reference->prefill(1, history);
  for (int step = 0; step < 20; ++step) {
    const std::vector<int32_t> tokens{int32_t(step), int32_t(60 + step)};
    EXPECT_EQ(engine->decodeBatch(tokens), reference->decodeBatch(tokens)) << "step " << step;
  }

  // Restored two positions back (the rings keep 3 beyond their windows, a
  // verify entry of 4), then an idle row at its past before it goes on: the
  // idle row writes into the page it shares, so into a copy.
  EXPECT_TRUE(engine->canRestore(saved, 34));
  EXPECT_FALSE(engine->canRestore(saved, 33));
  EXPECT_FALSE(engine->canRestore(saved, 38));
  EXPECT_FALSE(engine->canRestore(7, 1));
  EXPECT_THROW(engine->restore(2, saved, 33), RuntimeError);
  engine->restore(2, saved, 35);
  reference->prefill(2, history);
  reference->rollback(2, 35);
  EXPECT_EQ(engine->decodeBatch({1, 2, 3}, {true, true, false}),
            reference->decodeBatch({1, 2, 3}, {true, true, false}));
  EXPECT_EQ(engine->prefill(2, range(500, 6)), reference->prefill(2, range(500, 6)));

  // The saved conversation is as it was: restored again, it answers as the
  // history computed afresh.
  EXPECT_THROW(engine->restore(1, saved, 37), RuntimeError); // 1 holds positions
  engine->forget(1);
  reference->forget(1);
  engine->restore(1, saved, 37);
  reference->prefill(1, history);
  EXPECT_EQ(engine->prefill(1, range(700, 20)), reference->prefill(1, range(700, 20)));

  // Another engine making the same calls from their bytes ends the same.
  engine->observeCalls(nullptr);
  for (const std::string &bytes : calls)
    replay(*follower, decodeCall(bytes));
  EXPECT_EQ(describe(decodeCall(calls[1])), "save of conversation 0");
  EXPECT_EQ(describe(decodeCall(calls[2])),
            "restore of saved conversation 1 into conversation 1, keeping 37");
  EXPECT_EQ(follower->freeKvPages(), engine->freeKvPages());
  EXPECT_EQ(follower->decodeBatch({4, 5, 6}), engine->decodeBatch({4, 5, 6}));

  // Every page back once nobody holds it; reset drops saved ones too.
  EXPECT_THROW(engine->dropSaved(7), RuntimeError);
  engine->dropSaved(saved);
  EXPECT_FALSE(engine->canRestore(saved, 37));
  for (int64_t c = 0; c < kConversations; ++c)
    engine->forget(c);
  EXPECT_EQ(engine->freeKvPages(), engine->kvPages());
  engine->prefill(0, history);
  const int64_t again = engine->save(0);
  EXPECT_EQ(again, 2);
  engine->reset();
  EXPECT_FALSE(engine->canRestore(again, 1));
  EXPECT_EQ(engine->freeKvPages(), engine->kvPages());

  // Unpaged caches are the slots' own: nothing to share.
  std::unique_ptr<Engine> unpaged = load(0);
  EXPECT_FALSE(unpaged->canSave());
  EXPECT_THROW(unpaged->save(0), RuntimeError);
}

// A seeded random script of every call that moves KV pages (prefill,
// batched decode with idle rows, verify and rollback, save, restore, drop,
// forget) on an engine with a small pool, each conversation's tokens kept
// beside it; now and then a conversation's next logits are held to those of
// a second engine that prefills the same tokens from nothing. A page shared
// and written without its copy, or a ring restored wrong, is a different
// history there.
TEST(PagedKvTest, RandomCallsOverSharedPagesLeaveEveryConversationItsOwnHistory) {
  std::unique_ptr<Engine> engine = load(kPageTokens, 40), reference = load(kPageTokens);
  std::mt19937 random(11);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(random() % static_cast<uint32_t>(n)); };
  auto token = [&] { return static_cast<int32_t>(1 + pick(900)); };
  std::vector<Tokens> history(kConversations);
  std::map<int64_t, Tokens> saved;
  int checks = 0, restores = 0;
  // The pool's 40 pages: a history beyond 96 positions is forgotten, and so
  // are saved ones beyond three.
  auto room = [&](int64_t c, int64_t n) {
    return static_cast<int64_t>(history[c].size()) + n <= 96;
  };
  for (int op = 0; op < 160 && !HasFailure(); ++op) {
    const int64_t c = pick(kConversations);
    switch (pick(8)) {
    case 0: { // a prompt or its next chunk
      Tokens tokens(static_cast<size_t>(1 + pick(20)));
      for (int32_t &t : tokens)
        t = token();
      if (!room(c, static_cast<int64_t>(tokens.size())))
        break;
      engine->prefill(c, tokens);
      history[c].insert(history[c].end(), tokens.begin(), tokens.end());
      break;
    }
    case 1: { // a batched step, some rows idle
      Tokens tokens;
      std::vector<bool> stepped;
      for (int64_t d = 0; d < kConversations; ++d) {
        tokens.push_back(token());
        stepped.push_back(pick(3) != 0 && room(d, 1));
      }
      engine->decodeBatch(tokens, stepped);
      for (int64_t d = 0; d < kConversations; ++d)
        if (stepped[static_cast<size_t>(d)])
          history[d].push_back(tokens[static_cast<size_t>(d)]);
      break;
    }
    case 2: { // drafts verified, some rejected
      if (history[c].empty() || !room(c, 4))
        break;
      Tokens tokens(static_cast<size_t>(1 + pick(4)));
      for (int32_t &t : tokens)
        t = token();
      engine->verify(c, tokens);
      history[c].insert(history[c].end(), tokens.begin(), tokens.end());
      // Within the rings' room (a restored conversation's writes before it
      // count too).
      int64_t keep = static_cast<int64_t>(history[c].size()) - pick(4);
      if (!engine->canRollback(c, keep))
        keep = static_cast<int64_t>(history[c].size());
      engine->rollback(c, keep);
      history[c].resize(static_cast<size_t>(keep));
      break;
    }
    case 3: // saved, as kiln-serve does when another request takes the slot
      if (saved.size() >= 3) {
        engine->dropSaved(saved.begin()->first);
        saved.erase(saved.begin());
      }
      saved[engine->save(c)] = history[c];
      break;
    case 4: { // a saved history restored, a few positions back at most
      if (saved.empty())
        break;
      auto it = saved.begin();
      std::advance(it, pick(static_cast<int64_t>(saved.size())));
      int64_t keep = engine->savedPast(it->first) - pick(4);
      if (!engine->canRestore(it->first, keep))
        keep = engine->savedPast(it->first);
      engine->forget(c);
      engine->restore(c, it->first, keep);
      history[c].assign(it->second.begin(), it->second.begin() + keep);
      ++restores;
      break;
    }
    case 5:
      engine->forget(c);
      history[c].clear();
      break;
    default: { // a conversation's next token, against the history computed afresh
      if (history[c].empty() || !room(c, 1))
        break;
      const int32_t next = token();
      const std::vector<float> got = engine->decode(c, next);
      Tokens all = history[c];
      all.push_back(next);
      reference->forget(0);
      const std::vector<float> want = reference->prefill(0, all);
      float largest = 0, error = 0;
      for (size_t v = 0; v < want.size(); ++v) {
        largest = std::max(largest, std::fabs(want[v]));
        error = std::max(error, std::fabs(got[v] - want[v]));
      }
      EXPECT_LE(error, 1e-3f * largest)
          << "call " << op << ": conversation " << c << " at " << all.size() << " positions";
      history[c] = all;
      ++checks;
      break;
    }
    }
    EXPECT_EQ(engine->pastTokens(c), static_cast<int64_t>(history[c].size())) << "call " << op;
  }
  EXPECT_GT(checks, 20);
  EXPECT_GT(restores, 5);
  // Every page back once nobody holds one.
  for (const auto &[number, tokens] : saved)
    engine->dropSaved(number);
  for (int64_t c = 0; c < kConversations; ++c)
    engine->forget(c);
  EXPECT_EQ(engine->freeKvPages(), engine->kvPages());
}

} // namespace
} // namespace kiln
