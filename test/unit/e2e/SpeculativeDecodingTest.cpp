// Speculative decoding on this CPU, tiny and small compiled with a verify
// entry point (kilnc --verify-tokens 8): greedy output with speculation is
// token for token the output without it, whatever the drafter proposes:
// drafts that are right, wrong at a chosen place, or looked up in the
// conversation, and a draft model (tiny drafting for itself accepts every
// draft). The prompts are set so that drafts straddle the sliding window
// (tiny's is 8 positions, small's 256) and rollbacks happen in the sliding
// layers' rings. A verify call's logits are those decode gives, to f32
// rounding. Rolling back further than the rings keep is refused.
#include "models/muse_spark/Config.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Engine.h"
#include "runtime/engine/Sampler.h"
#include "runtime/speculate/LookupDrafter.h"
#include "runtime/speculate/ModelDrafter.h"
#include "runtime/speculate/ScriptedDrafter.h"
#include "runtime/speculate/SpeculativeBatch.h"
#include "runtime/speculate/SpeculativeDecoder.h"
#include "test/unit/e2e/CompileForHost.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace kiln {
namespace {

using muse_spark::Config;
using muse_spark::WeightFormat;
using Tokens = std::vector<int32_t>;

constexpr int64_t kVerifyTokens = 8;

struct Case {
  const char *config;
  WeightFormat format;
  int64_t newTokens;
  std::vector<int64_t> promptLengths; // one run each
  bool selfDraft;                     // also draft with a second engine of the same model
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  std::string name = std::string(info.param.config).substr(std::string("muse-spark-").size());
  return name + (info.param.format == WeightFormat::NVFP4 ? "_nvfp4" : "_bf16");
}

std::vector<uint8_t> compile(const Config &config, WeightFormat format, int64_t decodeBatch = 1) {
  kernels::LowerOptions lower;
  lower.maxPrefillTokens = 16;
  lower.verifyTokens = kVerifyTokens;
  lower.decodeBatch = decodeBatch;
  return e2e::compileForHost(config, format, lower);
}

// Greedy generation of `count` tokens after `prompt` through `drafter`.
Tokens speculate(Engine &engine, const Tokens &prompt, int64_t count, speculate::Drafter &drafter,
                 speculate::SpeculationStats &stats) {
  engine.reset();
  Sampler sampler;
  Tokens out = {argmax(engine.prefill(prompt).data(), static_cast<size_t>(engine.vocabSize()))};
  speculate::SpeculativeDecoder decoder(engine, 0, drafter, sampler, kVerifyTokens - 1);
  decoder.start(prompt, out.back());
  while (static_cast<int64_t>(out.size()) < count)
    for (int32_t token : decoder.step(count - static_cast<int64_t>(out.size())))
      out.push_back(token);
  stats = decoder.stats();
  return out;
}

class SpeculativeDecoding : public ::testing::TestWithParam<Case> {};

TEST_P(SpeculativeDecoding, GreedyOutputIsDecodingsOwn) {
  const Case &c = GetParam();
  const Config config = muse_spark::loadConfig(c.config);
  const std::vector<uint8_t> bytes = compile(config, c.format);
  ASSERT_FALSE(bytes.empty());
  EngineOptions options;
  options.weights = "synthetic:3";
  options.contextLength = 512;
  std::unique_ptr<Engine> engine = Engine::create(Artifact::fromBytes(bytes, "<target>"), options);
  ASSERT_EQ(engine->verifyTokens(), kVerifyTokens);
  std::unique_ptr<Engine> draftEngine;
  if (c.selfDraft)
    draftEngine = Engine::create(Artifact::fromBytes(bytes, "<draft>"), options);
  const auto vocab = static_cast<size_t>(engine->vocabSize());

  for (int64_t promptLength : c.promptLengths) {
    SCOPED_TRACE("prompt of " + std::to_string(promptLength) + " tokens");
    Tokens prompt(static_cast<size_t>(promptLength));
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = static_cast<int32_t>((i * 613 + 29) % vocab);

    // Without speculation: the tokens and each step's logits.
    engine->reset();
    std::vector<std::vector<float>> decodeLogits = {engine->prefill(prompt)};
    Tokens plain;
    for (int64_t i = 0; i < c.newTokens; ++i) {
      plain.push_back(argmax(decodeLogits.back().data(), vocab));
      decodeLogits.push_back(engine->decode(plain.back()));
    }

    // A verify call of the next 8 tokens gives decode's logits for each.
    engine->reset();
    engine->prefill(prompt);
    const Tokens block(plain.begin(), plain.begin() + kVerifyTokens);
    const std::vector<float> verified = engine->verify(0, block);
    double worst = 0, scale = 0;
    for (size_t r = 0; r < block.size(); ++r)
      for (size_t v = 0; v < vocab; ++v) {
        const float want = decodeLogits[r + 1][v];
        scale = std::max(scale, double(std::abs(want)));
        worst = std::max(worst, double(std::abs(verified[r * vocab + v] - want)));
      }
    EXPECT_LT(worst, 1e-3 * scale) << "verify's logits against decode's, of logits up to " << scale;
    std::printf("[ measured ] %s, prompt %lld: verify against decode, max |diff| %.2e of %.2f\n",
                c.config, static_cast<long long>(promptLength), worst, scale);

    speculate::SpeculationStats stats;
    speculate::ScriptedDrafter oracle(plain, prompt.size(), static_cast<int32_t>(vocab));
    EXPECT_EQ(speculate(*engine, prompt, c.newTokens, oracle, stats), plain)
        << "drafts of the known continuation, some wrong";
    EXPECT_GT(stats.tokensPerStep(), 2.0);
    std::printf("[ measured ] oracle drafts: %.2f tokens a step (%lld of %lld accepted)\n",
                stats.tokensPerStep(), static_cast<long long>(stats.accepted),
                static_cast<long long>(stats.drafted));

    speculate::LookupDrafter lookup({1, 4, kVerifyTokens - 1});
    EXPECT_EQ(speculate(*engine, prompt, c.newTokens, lookup, stats), plain)
        << "drafts looked up in the conversation";
    std::printf("[ measured ] lookup drafts: %.2f tokens a step (%lld of %lld accepted)\n",
                stats.tokensPerStep(), static_cast<long long>(stats.accepted),
                static_cast<long long>(stats.drafted));

    // The rings keep 7 positions beyond the window: rolling back 7 of 8
    // verified tokens is allowed, 8 is not.
    engine->reset();
    engine->prefill(prompt);
    engine->verify(0, block);
    const int64_t past = engine->pastTokens();
    EXPECT_FALSE(engine->canRollback(0, past - kVerifyTokens));
    EXPECT_FALSE(engine->canRollback(0, past + 1));
    // rollback refuses what canRollback refuses, saying why.
    const auto refusal = [&](int64_t keep) {
      try {
        engine->rollback(0, keep);
      } catch (const RuntimeError &error) {
        return std::string(error.what());
      }
      return std::string("no error");
    };
    EXPECT_NE(refusal(past - kVerifyTokens).find("positions beyond their windows"),
              std::string::npos)
        << refusal(past - kVerifyTokens);
    EXPECT_NE(refusal(past + 1).find("it holds " + std::to_string(past)), std::string::npos)
        << refusal(past + 1);
    EXPECT_EQ(engine->pastTokens(), past);
    EXPECT_TRUE(engine->canRollback(0, past - (kVerifyTokens - 1)));
    EXPECT_NO_THROW(engine->rollback(0, past - (kVerifyTokens - 1)));
    EXPECT_EQ(engine->pastTokens(), past - (kVerifyTokens - 1));

    if (draftEngine) {
      draftEngine->reset();
      speculate::ModelDrafter model(*draftEngine, engine->vocabSize());
      EXPECT_EQ(speculate(*engine, prompt, c.newTokens, model, stats), plain)
          << "drafts of a draft model";
      // The model drafting for itself: nearly every draft is accepted. Not
      // every one: the draft engine catches up on accepted tokens through
      // prefill calls while the target wrote those positions through verify,
      // and on a CPU whose prefill and decode step take different GEMM
      // families (AMX tiles, vdpbf16ps) their caches differ in the last bits,
      // which can flip a draft at a near tie (the output above is still
      // decoding's, token for token).
      EXPECT_GE(stats.accepted, stats.drafted * 9 / 10);
      EXPECT_GT(stats.tokensPerStep(), 6.0);
    }
  }
}

// Four conversations stepped together through verify_batch, each with its
// own drafter (scripted with wrong places, or lookup) and so its own draft
// length each step: every one's tokens are its tokens decoded alone.
TEST(SpeculativeBatch, EachConversationGetsItsOwnTokens) {
  const Config config = muse_spark::loadConfig("muse-spark-tiny");
  const std::vector<uint8_t> bytes = compile(config, WeightFormat::BF16, 4);
  ASSERT_FALSE(bytes.empty());
  EngineOptions options;
  options.weights = "synthetic:3";
  options.contextLength = 256;
  std::unique_ptr<Engine> engine = Engine::create(Artifact::fromBytes(bytes, "<batch>"), options);
  ASSERT_EQ(engine->conversations(), 4);
  const auto vocab = static_cast<size_t>(engine->vocabSize());
  const int64_t count = 80;
  std::vector<Tokens> prompts, plain(4);
  for (size_t c = 0; c < 4; ++c) {
    Tokens prompt(5 + 7 * c);
    for (size_t i = 0; i < prompt.size(); ++i)
      prompt[i] = static_cast<int32_t>((i * 389 + 17 * c + 3) % vocab);
    prompts.push_back(prompt);
    std::vector<float> logits = engine->prefill(static_cast<int64_t>(c), prompt);
    for (int64_t i = 0; i < count; ++i) {
      plain[c].push_back(argmax(logits.data(), vocab));
      logits = engine->decode(static_cast<int64_t>(c), plain[c].back());
    }
  }

  engine->reset();
  std::vector<std::unique_ptr<speculate::Drafter>> drafters;
  std::vector<Sampler> samplers(4);
  std::vector<speculate::SpeculativeBatch::Member> members(4);
  std::vector<Tokens> out(4);
  for (size_t c = 0; c < 4; ++c) {
    if (c % 2 == 0)
      drafters.push_back(std::make_unique<speculate::ScriptedDrafter>(plain[c], prompts[c].size(),
                                                                      static_cast<int32_t>(vocab)));
    else
      drafters.push_back(
          std::make_unique<speculate::LookupDrafter>(speculate::LookupOptions{1, 4, 7}));
    members[c].drafter = drafters.back().get();
    members[c].accept = speculate::samplingAcceptor(samplers[c]);
    out[c] = {argmax(engine->prefill(static_cast<int64_t>(c), prompts[c]).data(), vocab)};
    members[c].remaining = count - 1;
    speculate::SpeculativeBatch::start(members[c], prompts[c], out[c].back());
  }
  speculate::SpeculativeBatch batch(*engine, kVerifyTokens - 1);
  // Step while every member has tokens to come (they finish together or
  // nearly: the last ones step alone through plain decode, as a server would).
  while (std::all_of(members.begin(), members.end(),
                     [](const auto &member) { return member.remaining > 0; })) {
    std::vector<Tokens> yielded = batch.step(members);
    for (size_t c = 0; c < 4; ++c)
      out[c].insert(out[c].end(), yielded[c].begin(), yielded[c].end());
  }
  for (size_t c = 0; c < 4; ++c) {
    while (members[c].remaining > 0) {
      out[c].push_back(
          argmax(engine->decode(static_cast<int64_t>(c), members[c].pending).data(), vocab));
      members[c].pending = out[c].back();
      --members[c].remaining;
    }
    EXPECT_EQ(out[c], plain[c]) << "conversation " << c;
  }
  EXPECT_GT(batch.stats().tokensPerStep(), 2.0);
  std::printf("[ measured ] verify_batch of 4 conversations: %lld calls, %.2f tokens a "
              "conversation a call (%lld of %lld drafts accepted)\n",
              static_cast<long long>(batch.stats().verifyCalls), batch.stats().tokensPerStep(),
              static_cast<long long>(batch.stats().accepted),
              static_cast<long long>(batch.stats().drafted));
}

INSTANTIATE_TEST_SUITE_P(
    X86, SpeculativeDecoding,
    ::testing::Values(Case{"muse-spark-tiny", WeightFormat::BF16, 96, {5, 24, 61}, true},
                      Case{"muse-spark-tiny", WeightFormat::NVFP4, 96, {5, 24}, true},
                      Case{"muse-spark-small", WeightFormat::BF16, 40, {250}, false}),
    caseName);

} // namespace
} // namespace kiln
