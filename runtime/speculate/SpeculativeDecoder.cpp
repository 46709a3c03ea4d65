#include "runtime/speculate/SpeculativeDecoder.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/speculate/VerifyStep.h"

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

  const Verdict verdict = verifyStep(engine_, conversation_, pending_, drafts, acceptor_);
  stats_.verifyCalls += drafts.empty() ? 0 : 1;
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
