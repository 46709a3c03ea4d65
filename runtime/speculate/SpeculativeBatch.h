// Speculative decoding of several conversations together: each step drafts
// for every member, runs all of them in one call of the engine's
// verify_batch entry point (each conversation's last accepted token and
// its own drafts), keeps what each accepts and rolls each back past its
// first rejected draft; a step where no member has a draft is one
// decode_batch call. Member m is the engine's conversation m.
#pragma once

#include "runtime/engine/Engine.h"
#include "runtime/speculate/Drafter.h"
#include "runtime/speculate/SpeculativeDecoder.h"
#include "runtime/speculate/Verification.h"

#include <cstdint>
#include <vector>

namespace kiln::speculate {

class SpeculativeBatch {
public:
  struct Member {
    Drafter *drafter = nullptr;
    Acceptor accept;     // e.g. samplingAcceptor(its sampler)
    int32_t pending = 0; // the last token yielded, not yet in the caches
    // Tokens it may still yield (a step yields at most this many).
    int64_t remaining = 0;
  };

  // `draftTokens` is capped at the verify_batch entry's rows - 1. Throws
  // RuntimeError when the engine has no verify_batch entry point.
  SpeculativeBatch(Engine &engine, int64_t draftTokens);

  // The prompt of member `conversation` is in its caches and `first` was
  // sampled from its last logits: its drafter learns both.
  static void start(Member &member, const std::vector<int32_t> &prompt, int32_t first);
  // One verify_batch call for members 0 .. n-1 (each with remaining >= 1):
  // the tokens each yields, accepted drafts then its own next token.
  std::vector<std::vector<int32_t>> step(std::vector<Member> &members);

  const SpeculationStats &stats() const { return stats_; }

private:
  Engine &engine_;
  int64_t draftTokens_;
  SpeculationStats stats_;
};

} // namespace kiln::speculate
