#include "runtime/speculate/VerifyStep.h"

#include <algorithm>

namespace kiln::speculate {

Verdict verifyStep(Engine &engine, int64_t conversation, int32_t pending,
                   const std::vector<int32_t> &drafts, const Acceptor &accept) {
  if (drafts.empty())
    return accept(engine.decode(conversation, pending).data(), engine.vocabSize(), drafts);
  const int64_t past = engine.pastTokens(conversation);
  std::vector<int32_t> tokens = {pending};
  tokens.insert(tokens.end(), drafts.begin(), drafts.end());
  const std::vector<float> logits = engine.verify(conversation, tokens);
  const Verdict verdict = accept(logits.data(), engine.vocabSize(), drafts);
  // Keep the pending token and the accepted drafts.
  engine.rollback(conversation, past + 1 + verdict.accepted);
  return verdict;
}

std::vector<Verdict> verifyBatchStep(Engine &engine, const std::vector<int32_t> &pending,
                                     const std::vector<std::vector<int32_t>> &drafts,
                                     const std::vector<Acceptor> &accept, int64_t &verifyCalls) {
  const int64_t vocab = engine.vocabSize();
  const size_t n = pending.size();
  const bool plain = std::all_of(drafts.begin(), drafts.end(),
                                 [](const std::vector<int32_t> &d) { return d.empty(); });
  std::vector<Verdict> verdicts(n);
  if (plain) {
    const std::vector<float> logits = engine.decodeBatch(pending);
    for (size_t m = 0; m < n; ++m)
      verdicts[m] = accept[m](logits.data() + static_cast<int64_t>(m) * vocab, vocab, drafts[m]);
    return verdicts;
  }
  std::vector<int64_t> past(n);
  std::vector<std::vector<int32_t>> calls(n);
  for (size_t m = 0; m < n; ++m) {
    past[m] = engine.pastTokens(static_cast<int64_t>(m));
    calls[m] = {pending[m]};
    calls[m].insert(calls[m].end(), drafts[m].begin(), drafts[m].end());
  }
  const std::vector<float> logits = engine.verifyBatch(calls);
  ++verifyCalls;
  const int64_t stride = engine.verifyTokens() * vocab;
  for (size_t m = 0; m < n; ++m) {
    verdicts[m] = accept[m](logits.data() + static_cast<int64_t>(m) * stride, vocab, drafts[m]);
    engine.rollback(static_cast<int64_t>(m), past[m] + 1 + verdicts[m].accepted);
  }
  return verdicts;
}

} // namespace kiln::speculate
