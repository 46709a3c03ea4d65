// Speculative decoding of one conversation: each step drafts up to k tokens
// (Drafter), runs the last accepted token and the drafts through the
// engine's verify entry point in one call, keeps the drafts the target
// accepts (Verification.h) and rolls the KV caches back past the first
// rejected one. A step yields 1 to k + 1 tokens for the price of one call
// that reads the weights once.
//
//   engine.prefill(conversation, prompt) -> logits; first = sampler.sample(logits)
//   SpeculativeDecoder decoder(engine, conversation, drafter, sampler, k);
//   decoder.start(prompt, first);
//   while (...) for (int32_t token : decoder.step(remaining)) ...
#pragma once

#include "runtime/engine/Engine.h"
#include "runtime/engine/Sampler.h"
#include "runtime/speculate/Drafter.h"
#include "runtime/speculate/Verification.h"

#include <cstdint>
#include <vector>

namespace kiln::speculate {

struct SpeculationStats {
  int64_t steps = 0;       // steps: verify calls, and decode calls where nothing was drafted
  int64_t verifyCalls = 0; // steps that had drafts to check
  int64_t drafted = 0;     // draft tokens they checked
  int64_t accepted = 0;    // drafts the target accepted
  // Tokens a step yields on average: accepted drafts and the step's own.
  double tokensPerStep() const {
    return steps ? static_cast<double>(accepted + steps) / static_cast<double>(steps) : 0.0;
  }
};

class SpeculativeDecoder {
public:
  // `draftTokens` (k) is capped at engine.verifyTokens() - 1. Throws
  // RuntimeError when the engine has no verify entry point.
  SpeculativeDecoder(Engine &engine, int64_t conversation, Drafter &drafter, Sampler &sampler,
                     int64_t draftTokens);

  // The prompt is in the conversation's caches and `first` was sampled from
  // its last logits: the drafter learns both.
  void start(const std::vector<int32_t> &prompt, int32_t first);
  // One step: a verify call of the pending token and the drafts, or a decode
  // call when the drafter has nothing. Returns the tokens it yields, at most `maxTokens` (>= 1)
  // and what the context still holds: accepted drafts, then the target's own
  // next token, which the next step feeds.
  std::vector<int32_t> step(int64_t maxTokens);

  const SpeculationStats &stats() const { return stats_; }

  // What a step keeps of the drafts: by default verifySampled with the
  // sampler; a replay (kiln-bench-speculate) accepts by its script instead.
  void setAcceptor(Acceptor acceptor) { acceptor_ = std::move(acceptor); }

private:
  Engine &engine_;
  int64_t conversation_;
  Drafter &drafter_;
  int64_t draftTokens_;
  Acceptor acceptor_;
  int32_t pending_ = 0; // the last token yielded, not yet in the caches
  SpeculationStats stats_;
};

} // namespace kiln::speculate
