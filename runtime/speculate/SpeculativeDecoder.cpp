#include "runtime/speculate/SpeculativeDecoder.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/speculate/Verification.h"

#include <algorithm>

namespace kiln::speculate {

SpeculativeDecoder::SpeculativeDecoder(Engine &engine, int64_t conversation, Drafter &drafter,
                                       Sampler &sampler, int64_t draftTokens)
    : engine_(engine), conversation_(conversation), drafter_(drafter),
      draftTokens_(std::min(draftTokens, engine.verifyTokens() - 1)) {
  if (engine.verifyTokens() < 2)
    throw RuntimeError("speculative decoding needs an artifact with a verify entry point "
                       "(compile it with kilnc --verify-tokens N)");
  acceptor_ = samplingAcceptor(sampler);
  if (draftTokens < 1)
    throw RuntimeError("speculative decoding drafts at least 1 token a step, got " +
                       std::to_string(draftTokens));
}

void SpeculativeDecoder::start(const std::vector<int32_t> &prompt, int32_t first) {
  drafter_.reset();
  drafter_.append(prompt);
  drafter_.append({first});
  pending_ = first;
}

std::vector<int32_t> SpeculativeDecoder::step(int64_t maxTokens) {
  const int64_t past = engine_.pastTokens(conversation_);
  // The call's tokens take positions past..: the pending one and drafts.
  const int64_t room = engine_.contextLength() - past;
  if (maxTokens < 1 || room < 1)
    throw RuntimeError("speculative step: no room (" + std::to_string(maxTokens) +
                       " tokens wanted, " + std::to_string(room) + " positions left)");
  const int64_t limit = std::min({draftTokens_, maxTokens - 1, room - 1});
  std::vector<int32_t> drafts = limit > 0 ? drafter_.draft(limit) : std::vector<int32_t>{};
  if (static_cast<int64_t>(drafts.size()) > limit)
    drafts.resize(static_cast<size_t>(limit));

  Verdict verdict;
  if (drafts.empty()) {
    // Nothing to check: a plain decode step, cheaper than a verify call.
    verdict = acceptor_(engine_.decode(conversation_, pending_).data(), engine_.vocabSize(), {});
  } else {
    std::vector<int32_t> tokens;
    tokens.reserve(drafts.size() + 1);
    tokens.push_back(pending_);
    tokens.insert(tokens.end(), drafts.begin(), drafts.end());
    const std::vector<float> logits = engine_.verify(conversation_, tokens);
    verdict = acceptor_(logits.data(), engine_.vocabSize(), drafts);
    // Keep the pending token and the accepted drafts.
    engine_.rollback(conversation_, past + 1 + verdict.accepted);
    ++stats_.verifyCalls;
  }

  std::vector<int32_t> yielded(drafts.begin(), drafts.begin() + verdict.accepted);
  yielded.push_back(verdict.next);
  drafter_.append(yielded);
  pending_ = verdict.next;
  ++stats_.steps;
  stats_.drafted += static_cast<int64_t>(drafts.size());
  stats_.accepted += verdict.accepted;
  return yielded;
}

} // namespace kiln::speculate
