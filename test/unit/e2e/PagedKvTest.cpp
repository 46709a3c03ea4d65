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

#include <numeric>

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

} // namespace
} // namespace kiln
