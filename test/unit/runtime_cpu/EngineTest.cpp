// The engine end to end on a hand-built artifact whose kernel library is
// compiled from C at test time (TestKernels.h): descriptors, scalars, parts,
// KV caches (global and sliding), copies, VNNI weights and the logits, checked
// against a plain C++ recomputation; then every refusal at load time.
#include "runtime/engine/Engine.h"
#include "runtime/engine/EngineCall.h"

#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/SyntheticWeights.h"
#include "runtime/core/Float.h"
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/RuntimeError.h"

#include "test/unit/runtime_cpu/EngineTestArtifact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace kiln {
namespace {

using namespace kiln::runtime_test;
using muse_spark::Config;

// The same computation in plain C++ from the synthetic weights.
class Reference {
public:
  explicit Reference(uint64_t seed) {
    const Config config = muse_spark::loadConfig("muse-spark-tiny");
    embed_ = weight(config, "model.embed_tokens.weight", seed);
    lm_ = weight(config, "lm_head.weight", seed);
    expert_ = weight(config, "model.layers.0.mlp.experts.2.up_proj.weight", seed);
  }

  // Logits after appending `tokens`, the last token's, with `parts` for the
  // stamp launch.
  std::vector<double> append(const std::vector<int32_t> &tokens, int parts) {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    const int64_t p = static_cast<int64_t>(history_.size()) - 1;
    std::vector<double> g(kWidth, 0), s(kWidth, 0), mv(kLatent, 0);
    for (int64_t j = 0; j <= p; ++j) {
      const float *row = &embed_[history_[j] * kHidden];
      for (int64_t i = 0; i < kWidth; ++i) {
        const double value = row[i] + 0.5 * row[kWidth + i];
        g[i] += value;
        if (j > p - kWindow)
          s[i] += value;
      }
    }
    const float *last = &embed_[history_[p] * kHidden];
    for (int64_t n = 0; n < kLatent; ++n)
      for (int64_t k = 0; k < kLatent; ++k)
        mv[n] += double{last[k]} * expert_[n * kLatent + k];
    std::vector<double> logits(kVocab);
    for (int64_t v = 0; v < kVocab; ++v) {
      double sum = 0;
      for (int64_t i = 0; i < kWidth; ++i)
        sum += (g[i] + 0.5 * s[i]) * lm_[v * kHidden + i];
      logits[v] = sum + mv[v % kLatent] / 100 + 3;
    }
    logits[kVocab - 1] = parts;
    return logits;
  }

private:
  static std::vector<float> weight(const Config &config, const std::string &name, uint64_t seed) {
    for (const auto &spec : muse_spark::checkpointManifest(config, muse_spark::WeightFormat::BF16))
      if (spec.name == name) {
        std::vector<uint16_t> bits(spec.shape[0] * spec.shape[1]);
        muse_spark::synthesizeTensor(config, spec, seed, reinterpret_cast<uint8_t *>(bits.data()));
        std::vector<float> values;
        for (uint16_t b : bits)
          values.push_back(bf16ToFloat(b));
        return values;
      }
    ADD_FAILURE() << name;
    return {};
  }

  std::vector<float> embed_, lm_, expert_;
  std::vector<int32_t> history_;
};

void expectLogitsNear(const std::vector<float> &actual, const std::vector<double> &expected,
                      const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t v = 0; v < actual.size(); ++v)
    ASSERT_NEAR(actual[v], expected[v], 1e-3 + 1e-4 * std::abs(expected[v]))
        << what << ", logit " << v;
}

std::vector<int32_t> prompt(int count, int salt = 0) {
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back((37 * i + 11 + salt) % kVocab);
  return ids;
}

template <typename Fn> std::string errorOf(Fn &&fn) {
  try {
    fn();
  } catch (const std::exception &error) {
    return error.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return "";
}

#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                       \
      << "missing \"" << part << "\" in: " << text

class EngineTest : public ::testing::Test {
protected:
  void SetUp() override {
    if (!runtime_test::haveTestCompiler())
      GTEST_SKIP() << "no C compiler to build test kernels";
    ASSERT_FALSE(testKernelBlob().empty());
  }

  static std::unique_ptr<Engine> make(const TestArtifact &a, EngineOptions options = {}) {
    if (options.weights.empty())
      options.weights = "synthetic:5";
    if (options.threads == 0)
      options.threads = 3;
    return Engine::create(Artifact::fromBytes(serialize(a), "test.kiln"), options);
  }
};

TEST_F(EngineTest, PrefillAndDecodeMatchReference) {
  auto engine = make(testArtifact());
  EXPECT_EQ(engine->vocabSize(), kVocab);
  EXPECT_EQ(engine->contextLength(), 4096);
  EXPECT_EQ(engine->numThreads(), 3);
  EXPECT_EQ(engine->weightBytes(), 2u * kVocab * kHidden * 2 + 2u * kLatent * kLatent * 2);
  EXPECT_EQ(engine->arenaBytes(), kArenaBytes); // one arena, shared by the entry points
  Reference reference(5);
  // 20 tokens: chunks of 8, 8 and 4; the sliding cache wraps twice.
  const std::vector<int32_t> ids = prompt(20);
  expectLogitsNear(engine->prefill(ids), reference.append(ids, 3), "prefill");
  EXPECT_EQ(engine->pastTokens(), 20);
  for (int step = 0; step < 5; ++step) {
    const int32_t token = (7 * step + 3) % kVocab;
    expectLogitsNear(engine->decode(token), reference.append({token}, 3),
                     "decode step " + std::to_string(step));
  }
  EXPECT_EQ(engine->pastTokens(), 25);
}

TEST_F(EngineTest, ChunkingAndEntryPointDoNotChangeLogits) {
  const std::vector<int32_t> ids = prompt(13, 5);
  auto whole = make(testArtifact());
  const std::vector<float> expected = whole->prefill(ids);
  auto split = make(testArtifact());
  split->prefill({ids.begin(), ids.begin() + 6});
  EXPECT_EQ(split->prefill({ids.begin() + 6, ids.end()}), expected);
  auto oneByOne = make(testArtifact());
  std::vector<float> last;
  for (int32_t id : ids)
    last = oneByOne->decode(id);
  EXPECT_EQ(last, expected);
}

TEST_F(EngineTest, PartsFollowThreadsAndMaxParts) {
  const std::vector<int32_t> ids = prompt(9);
  EngineOptions one;
  one.threads = 1;
  EngineOptions many;
  many.threads = 12;
  const std::vector<float> a = make(testArtifact(), one)->prefill(ids);
  const std::vector<float> b = make(testArtifact(), many)->prefill(ids);
  // The last logit counts the parts of the stamp launch: min(8, threads).
  EXPECT_EQ(a.back(), 1.0f);
  EXPECT_EQ(b.back(), 8.0f);
  EXPECT_EQ(std::vector<float>(a.begin(), a.end() - 1), std::vector<float>(b.begin(), b.end() - 1));
}

TEST_F(EngineTest, ProfileDecodeTimesEveryLaunchAndDecodes) {
  const std::vector<int32_t> ids = prompt(9);
  auto plain = make(testArtifact());
  plain->prefill(ids);
  plain->decode(4);
  const std::vector<float> expected = plain->decode(5);
  auto profiled = make(testArtifact());
  profiled->prefill(ids);
  const std::vector<Engine::StepTime> times = profiled->profileDecode(4);
  EXPECT_EQ(profiled->pastTokens(), 10); // a decode step like any other
  EXPECT_EQ(profiled->decode(5), expected);
  // One entry per launch of the decode entry point, in order, each named.
  const fb::EntryPoint &decode = profiled->artifact().entryPoint("decode");
  size_t launches = 0;
  for (const fb::StepEntry *step : *decode.steps())
    launches += step->step_type() == fb::Step::Launch;
  ASSERT_EQ(times.size(), launches);
  for (const Engine::StepTime &t : times) {
    EXPECT_FALSE(t.kernel.empty());
    EXPECT_GE(t.milliseconds, 0.0);
  }
}

TEST_F(EngineTest, ProfilePrefillTimesOneCallAndPrefills) {
  const std::vector<int32_t> ids = prompt(7); // the test artifact takes 8 a call
  auto plain = make(testArtifact());
  plain->prefill(ids);
  const std::vector<float> expected = plain->decode(4);
  auto profiled = make(testArtifact());
  const std::vector<Engine::StepTime> times = profiled->profilePrefill(ids);
  EXPECT_EQ(profiled->pastTokens(), 7); // the tokens joined the conversation
  EXPECT_EQ(profiled->decode(4), expected);
  const fb::EntryPoint &entry = profiled->artifact().entryPoint("prefill");
  size_t launches = 0;
  for (const fb::StepEntry *step : *entry.steps())
    launches += step->step_type() == fb::Step::Launch;
  ASSERT_EQ(times.size(), launches);
  // More than one call's worth of tokens, or none, is refused.
  EXPECT_THROW(profiled->profilePrefill({}), RuntimeError);
  EXPECT_THROW(profiled->profilePrefill(std::vector<int32_t>(size_t(entry.max_tokens()) + 1, 1)),
               RuntimeError);
}

TEST_F(EngineTest, DecodeBatchContinuesEachConversation) {
  auto engine = make(batchTestArtifact(3));
  ASSERT_EQ(engine->conversations(), 3);
  // Conversations of different lengths; the sliding window wraps in two.
  const std::vector<std::vector<int32_t>> prompts = {prompt(5), prompt(11, 1), prompt(20, 2)};
  std::vector<Reference> references(3, Reference(5));
  for (int64_t c = 0; c < 3; ++c)
    expectLogitsNear(engine->prefill(c, prompts[c]), references[c].append(prompts[c], 3),
                     "prefill of conversation " + std::to_string(c));
  EXPECT_EQ(engine->pastTokens(0), 5);
  EXPECT_EQ(engine->pastTokens(1), 11);
  EXPECT_EQ(engine->pastTokens(2), 20);
  for (int step = 0; step < 4; ++step) {
    const std::vector<int32_t> tokens = {(3 * step + 1) % int32_t(kVocab),
                                         (5 * step + 2) % int32_t(kVocab),
                                         (7 * step + 3) % int32_t(kVocab)};
    const std::vector<float> rows = engine->decodeBatch(tokens);
    ASSERT_EQ(rows.size(), size_t(3 * kVocab));
    for (int64_t c = 0; c < 3; ++c)
      expectLogitsNear(
          std::vector<float>(rows.begin() + c * kVocab, rows.begin() + (c + 1) * kVocab),
          references[c].append({tokens[c]}, 3),
          "step " + std::to_string(step) + " of conversation " + std::to_string(c));
  }
  // A smaller batch steps the first conversations only; the one-conversation
  // entry points carry on where the batch left each conversation.
  const std::vector<float> two = engine->decodeBatch({9, 10});
  expectLogitsNear(std::vector<float>(two.begin() + kVocab, two.end()),
                   references[1].append({10}, 3), "a batch of 2");
  references[0].append({9}, 3);
  EXPECT_EQ(engine->pastTokens(0), 10);
  EXPECT_EQ(engine->pastTokens(1), 16);
  EXPECT_EQ(engine->pastTokens(2), 24);
  expectLogitsNear(engine->decode(2, 11), references[2].append({11}, 3),
                   "decode of conversation 2");
  expectLogitsNear(engine->decode(12), references[0].append({12}, 3), "decode of conversation 0");
  // What a batch refuses.
  EXPECT_HAS(errorOf([&] { engine->decodeBatch({1, 2, 3, 4}); }), "1 to 3 tokens");
  EXPECT_HAS(errorOf([&] { engine->decodeBatch({}); }), "1 to 3 tokens");
  EXPECT_HAS(errorOf([&] { engine->decode(3, 1); }), "conversation 3 is outside 0..2");
  EXPECT_HAS(errorOf([&] { engine->pastTokens(-1); }), "outside");
  // reset() forgets every conversation.
  engine->reset();
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_EQ(engine->pastTokens(c), 0);
  Reference fresh(5);
  expectLogitsNear(engine->prefill(1, prompts[0]), fresh.append(prompts[0], 3), "after reset");
}

// A batch where some conversations sit out (a server stepping the requests
// that decode while others prefill or are gone): their rows are computed and
// thrown away, their positions stay, and every later call (alone, batched,
// a rollback to what they hold) finds them as they were, the sliding rings
// included.
TEST_F(EngineTest, IdleRowsOfABatchLeaveTheirConversationsAsTheyWere) {
  auto engine = make(batchTestArtifact(3));
  const std::vector<std::vector<int32_t>> prompts = {prompt(5), prompt(11, 1), prompt(20, 2)};
  std::vector<Reference> references(3, Reference(5));
  for (int64_t c = 0; c < 3; ++c)
    references[c].append(prompts[c], 3), engine->prefill(c, prompts[c]);
  const std::vector<std::vector<bool>> patterns = {
      {true, false, true}, {false, true, true}, {false, false, true}, {true, true, false}};
  std::vector<int64_t> past = {5, 11, 20};
  for (int step = 0; step < 8; ++step) {
    const std::vector<bool> &stepped = patterns[size_t(step) % patterns.size()];
    const std::vector<int32_t> tokens = {(3 * step + 1) % int32_t(kVocab),
                                         (5 * step + 2) % int32_t(kVocab),
                                         (7 * step + 3) % int32_t(kVocab)};
    const std::vector<float> rows = engine->decodeBatch(tokens, stepped);
    ASSERT_EQ(rows.size(), size_t(3 * kVocab));
    for (int64_t c = 0; c < 3; ++c) {
      if (!stepped[size_t(c)])
        continue;
      ++past[size_t(c)];
      expectLogitsNear(
          std::vector<float>(rows.begin() + c * kVocab, rows.begin() + (c + 1) * kVocab),
          references[c].append({tokens[c]}, 3),
          "step " + std::to_string(step) + " of conversation " + std::to_string(c));
    }
    for (int64_t c = 0; c < 3; ++c)
      EXPECT_EQ(engine->pastTokens(c), past[size_t(c)]) << "step " << step;
  }
  // A rollback to all a conversation holds is still allowed, and each carries
  // on alone from where it was.
  engine->rollback(1, engine->pastTokens(1));
  for (int64_t c = 0; c < 3; ++c)
    expectLogitsNear(engine->decode(c, 13), references[c].append({13}, 3),
                     "conversation " + std::to_string(c) + " alone after idle rows");
  // One conversation's greedy step: its best token, the others unmoved.
  const std::vector<double> alone = references[2].append({11}, 3);
  EXPECT_EQ(engine->decodeGreedy(2, 11),
            std::max_element(alone.begin(), alone.end()) - alone.begin());
  // The greedy form: the stepped row's best token, the idle ones unmoved.
  const std::vector<double> expected = references[1].append({5}, 3);
  const std::vector<int32_t> chosen = engine->decodeBatchGreedy({4, 5, 6}, {false, true, false});
  EXPECT_EQ(chosen[1], std::max_element(expected.begin(), expected.end()) - expected.begin());
  EXPECT_EQ(engine->pastTokens(0), past[0] + 1);
  EXPECT_EQ(engine->pastTokens(1), past[1] + 2);
  EXPECT_EQ(engine->pastTokens(2), past[2] + 2);
  EXPECT_HAS(errorOf([&] { engine->decodeBatch({1, 2}, {true}); }), "1 step flags for 2 tokens");
  EXPECT_HAS(errorOf([&] {
               engine->decodeBatchGreedy({1, 2}, {true, false, true});
             }),
             "3 step flags for 2 tokens");
}

// kiln-serve --nproc: each state-changing call of one engine, handed to the
// observer as bytes, made again on a second engine of the same artifact,
// leaves that one where the first is (positions, caches: the next batch's
// logits are the same bits). Bytes that are not a call are refused.
TEST_F(EngineTest, ObservedCallsReplayedOnAnotherEngineLeaveItTheSame) {
  auto leader = make(batchTestArtifact(3));
  auto follower = make(batchTestArtifact(3));
  std::vector<std::string> sent;
  leader->observeCalls([&](const EngineCall &call) { sent.push_back(encodeCall(call)); });
  for (int64_t c = 0; c < 3; ++c)
    leader->prefill(c, prompt(7 + 4 * int(c), int(c)));
  leader->decodeBatch({1, 2, 3}, {true, false, true});
  leader->decodeBatchGreedy({4, 5});
  leader->decode(1, 6);
  leader->decodeGreedy(2, 7);
  EXPECT_TRUE(leader->canRollback(0, leader->pastTokens(0)));
  EXPECT_FALSE(leader->canRollback(0, leader->pastTokens(0) + 1));
  leader->rollback(0, leader->pastTokens(0));
  leader->forget(2);
  leader->prefill(2, prompt(9, 4));
  ASSERT_EQ(sent.size(), 10u);
  EXPECT_EQ(describe(decodeCall(sent[3])), "decode_batch of 3 conversations");
  EXPECT_EQ(describe(decodeCall(sent[6])), "decode_greedy of 1 tokens, conversation 2");
  EXPECT_EQ(describe(decodeCall(sent[7])), "rollback of conversation 0 to 9");
  for (const std::string &bytes : sent)
    replay(*follower, decodeCall(bytes));
  leader->observeCalls(nullptr);
  for (int64_t c = 0; c < 3; ++c)
    EXPECT_EQ(follower->pastTokens(c), leader->pastTokens(c)) << "conversation " << c;
  EXPECT_EQ(follower->decodeBatch({7, 8, 9}), leader->decodeBatch({7, 8, 9}));
  EXPECT_EQ(sent.size(), 10u); // no longer observed

  // The first call's 7 tokens, cut after the first.
  EXPECT_HAS(errorOf([&] { decodeCall(sent[0].substr(0, 25)); }), "counts 7 elements past its end");
  EXPECT_HAS(errorOf([&] { decodeCall(std::string(1, '\x20')); }), "unknown kind 32");
  EXPECT_HAS(errorOf([&] { decodeCall(sent[7] + "x"); }), "bytes past its end");
}

TEST_F(EngineTest, RefusesABatchEntryWhoseTokensAreNotItsConversations) {
  TestArtifact a = batchTestArtifact(3);
  a.entryPoints.back().maxTokens = 4;
  EXPECT_HAS(errorOf([&] { make(a); }),
             "sequences 3 must be at least 2 and, times sequence_rows 1, equal max_tokens (4)");
  TestArtifact lastOnly = batchTestArtifact(3);
  lastOnly.entryPoints.back().logitsRows = fixed(1);
  EXPECT_HAS(errorOf([&] { make(lastOnly); }), "a batched entry writes every token's logits");
}

TEST_F(EngineTest, OneConversationArtifactsRefuseBatches) {
  auto engine = make(testArtifact());
  EXPECT_EQ(engine->conversations(), 1);
  EXPECT_HAS(errorOf([&] { engine->decodeBatch({1}); }), "no decode_batch entry");
  EXPECT_HAS(errorOf([&] { engine->prefill(1, {1}); }), "compile with kilnc --decode-batch N");
}

TEST_F(EngineTest, ResetForgetsTheConversation) {
  auto engine = make(testArtifact());
  const std::vector<float> first = engine->prefill(prompt(10));
  engine->prefill(prompt(3, 1));
  engine->reset();
  EXPECT_EQ(engine->pastTokens(), 0);
  EXPECT_EQ(engine->prefill(prompt(10)), first);
}

TEST_F(EngineTest, OnlyOneEntryPoint) {
  const std::vector<int32_t> ids = prompt(11);
  const std::vector<float> expected = make(testArtifact())->prefill(ids);
  TestArtifact prefillOnly = testArtifact();
  prefillOnly.entryPoints.pop_back();
  auto engine = make(prefillOnly);
  EXPECT_EQ(engine->prefill(ids), expected);
  TestArtifact decodeOnly = testArtifact();
  decodeOnly.entryPoints.erase(decodeOnly.entryPoints.begin());
  EXPECT_EQ(make(decodeOnly)->prefill(ids), expected);
}

TEST_F(EngineTest, CheckpointWeightsMatchSynthetic) {
  std::string dir = ::testing::TempDir() + "/kiln-engine-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  // The test artifact holds layer 0 of tiny and experts 1 and 2: its
  // checkpoint, one layer of three experts (a checkpoint with layers or
  // experts the artifact lacks is refused).
  muse_spark::Config oneLayer = muse_spark::loadConfig("muse-spark-tiny");
  oneLayer.numHiddenLayers = 1;
  oneLayer.globalAttentionPeriod = 1;
  oneLayer.numExperts = 3;
  oneLayer.numExpertsPerTok = std::min<int64_t>(oneLayer.numExpertsPerTok, 3);
  muse_spark::writeSyntheticCheckpoint(oneLayer, muse_spark::WeightFormat::BF16, 5, dir,
                                       uint64_t{2} << 20);
  EngineOptions options;
  options.weights = dir;
  uint64_t lastDone = 0, lastTotal = 0;
  options.progress = [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, lastDone);
    lastDone = done;
    lastTotal = total;
  };
  auto engine = make(testArtifact(), options);
  EXPECT_EQ(lastDone, lastTotal);
  EXPECT_EQ(lastTotal, engine->weightBytes());
  const std::vector<int32_t> ids = prompt(12);
  EXPECT_EQ(engine->prefill(ids), make(testArtifact())->prefill(ids));
  std::filesystem::remove_all(dir);
}

TEST_F(EngineTest, LoadsFromFile) {
  std::string dir = ::testing::TempDir() + "/kiln-engine-XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const std::vector<uint8_t> bytes = serialize(testArtifact());
  std::ofstream(dir + "/test.kiln", std::ios::binary)
      .write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
  EngineOptions options;
  options.weights = "synthetic:5";
  options.threads = 3; // as make(): the last logit counts parts
  auto engine = Engine::load(dir + "/test.kiln", options);
  EXPECT_EQ(engine->artifact().source(), dir + "/test.kiln");
  EXPECT_EQ(engine->prefill(prompt(4)), make(testArtifact())->prefill(prompt(4)));
  EXPECT_HAS(errorOf([&] { Engine::load(dir + "/missing.kiln", options); }),
             "missing.kiln: cannot open");
  std::filesystem::remove_all(dir);
}

TEST_F(EngineTest, CallErrors) {
  EngineOptions options;
  options.contextLength = 24;
  auto engine = make(testArtifact(), options);
  EXPECT_HAS(errorOf([&] { engine->prefill({}); }), "at least one token");
  EXPECT_HAS(errorOf([&] {
               engine->prefill({1, 1024});
             }),
             "token id 1024 is outside the vocabulary 0..1023");
  EXPECT_HAS(errorOf([&] { engine->decode(-1); }), "token id -1");
  EXPECT_EQ(engine->pastTokens(), 0);
  EXPECT_HAS(errorOf([&] { engine->prefill(prompt(25)); }), "do not fit the context");
  engine->prefill(prompt(20));
  for (int i = 0; i < 4; ++i)
    engine->decode(1);
  EXPECT_HAS(errorOf([&] { engine->decode(1); }), "the context is full");
  EXPECT_EQ(engine->pastTokens(), 24);
}

TEST_F(EngineTest, RefusesOtherTargetsAndMissingFeatures) {
  TestArtifact gpu = testArtifact();
  gpu.targetKind = fb::TargetKind::NVPTX;
  gpu.libraryFormat = "ptx";
  gpu.chip = "sm_90";
  EXPECT_HAS(errorOf([&] { make(gpu); }), "artifact is for nvptx sm_90");

  TestArtifact unknown = testArtifact();
  unknown.features = {"sse2", "warp-drive"};
  EXPECT_HAS(errorOf([&] { make(unknown); }), "warp-drive");

  for (const std::string &feature : knownCpuFeatures())
    if (!*cpuHasFeature(feature)) {
      TestArtifact lacking = testArtifact();
      lacking.features = {feature};
      const std::string error = errorOf([&] { make(lacking); });
      EXPECT_HAS(error, "the CPU lacks " + feature);
      // A --cpu that works here: the host's, and its level anywhere.
      EXPECT_HAS(error, "kilnc --target=x86 --cpu=host on this machine, or --cpu=" +
                            hostX86Level() + " for any CPU of its level");
      break;
    }

  if (cpuHasAmx()) {
    TestArtifact amx = testArtifact();
    amx.features = {"amx-tile", "amx-bf16"};
    EXPECT_NO_THROW(make(amx));
  }
}

TEST_F(EngineTest, MultiRankArtifactsNeedTheirJob) {
  TestArtifact tp = testArtifact();
  tp.tp = 2;
  tp.world = 2;
  ::unsetenv("KILN_RANK");
  ::unsetenv("KILN_WORLD_SIZE");
  EXPECT_HAS(errorOf([&] { make(tp); }),
             "the artifact runs on 2 ranks (tp 2, ep 1), one process each: start it with "
             "--nproc 2 (kiln-run, kiln-serve");
  ::setenv("KILN_RANK", "0", 1);
  ::setenv("KILN_WORLD_SIZE", "3", 1);
  ::setenv("KILN_RENDEZVOUS", "/nonexistent/rv", 1);
  EXPECT_HAS(errorOf([&] { make(tp); }), "runs on 2 ranks (tp 2, ep 1), but this job has 3");
  ::setenv("KILN_WORLD_SIZE", "x", 1);
  EXPECT_HAS(errorOf([&] { make(tp); }), "KILN_WORLD_SIZE='x' is not a rank count");
  ::unsetenv("KILN_RANK");
  ::unsetenv("KILN_WORLD_SIZE");
  ::unsetenv("KILN_RENDEZVOUS");
}

TEST_F(EngineTest, ARankLoadedAloneHoldsItsShareAndRunsNothing) {
  TestArtifact tp = testArtifact();
  tp.tp = 2;
  tp.world = 2;
  EngineOptions options;
  options.loadAlone = true;
  EXPECT_HAS(errorOf([&] { make(tp, options); }), "loading a rank alone needs the rank");
  options.rank = RankInfo{1, 2, std::string(), 60};
  std::unique_ptr<Engine> engine = make(tp, options);
  EXPECT_EQ(engine->rank(), 1);
  EXPECT_EQ(engine->worldSize(), 2);
  EXPECT_GT(engine->weightBytes(), 0u);
  EXPECT_HAS(errorOf([&] {
               engine->prefill({1, 2, 3});
             }),
             "rank 1 of 2 was loaded alone (EngineOptions::loadAlone): it runs only in its job");
  EXPECT_HAS(errorOf([&] { engine->decode(1); }), "was loaded alone");
}

TEST_F(EngineTest, MissingKernelSymbol) {
  TestArtifact a = testArtifact();
  a.kernels[3].name = "kiln_expert_matmul";
  EXPECT_HAS(errorOf([&] { make(a); }), "no symbol 'kiln_expert_matmul'");
}

TEST_F(EngineTest, WeightMismatchNamesTheTensor) {
  TestArtifact a = testArtifact();
  a.weights[1].shape = {kHidden, kVocab};
  const std::string message = errorOf([&] { make(a); });
  EXPECT_HAS(message, "'lm_head.weight'");
  EXPECT_HAS(message, "expects BF16 [256, 1024]");
  EXPECT_HAS(message, "has BF16 [1024, 256]");
  EXPECT_HAS(errorOf([&] {
               EngineOptions options;
               options.weights = "synthetic:abc";
               make(testArtifact(), options);
             }),
             "seed 'abc'");
}

TEST_F(EngineTest, BufferOutsideItsBuffer) {
  // Positions read 16 ints where 8 were allocated (rounded to 64 bytes: 16
  // fit, 17 do not).
  TestArtifact input = testArtifact();
  std::get<TestLaunch>(input.entryPoints[0].steps[1]).buffers[1].shape = {tokens(17)};
  const std::string message = errorOf([&] { make(input); });
  EXPECT_HAS(message, "entry point 'prefill', steps[1] (launch of 'kiln_kv_append'");
  EXPECT_HAS(message, "buffers[1]: Input buffer 1 is used up to byte 68");

  TestArtifact kv = testArtifact();
  std::get<TestLaunch>(kv.entryPoints[1].steps[3]).buffers[0].offset = 256;
  EXPECT_HAS(errorOf([&] { make(kv); }), "KvCache buffer 0 is used up to");

  TestArtifact logits = testArtifact();
  std::get<TestLaunch>(logits.entryPoints[0].steps.back()).buffers[5].shape = {fixed(1),
                                                                               fixed(kVocab / 2)};
  EXPECT_HAS(errorOf([&] { make(logits); }), "logits of width 512, but the vocabulary has 1024");
}

TEST_F(EngineTest, ContextLengthLimits) {
  EngineOptions options;
  options.contextLength = 2000000;
  EXPECT_HAS(errorOf([&] { make(testArtifact(), options); }),
             "context length 2000000 is outside 1..1048576");
  options.contextLength = 8;
  auto engine = make(testArtifact(), options);
  EXPECT_EQ(engine->contextLength(), 8);
  EXPECT_EQ(engine->kvCacheBytes(), 2u * (8 * 64 * 4) + 2u * (kWindow * 64 * 4));
}

} // namespace
} // namespace kiln
