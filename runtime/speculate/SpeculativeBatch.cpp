#include "runtime/speculate/SpeculativeBatch.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/speculate/VerifyStep.h"

#include <algorithm>
#include <string>

namespace kiln::speculate {

SpeculativeBatch::SpeculativeBatch(Engine &engine, int64_t draftTokens)
    : engine_(engine), draftTokens_(std::min(draftTokens, engine.verifyTokens() - 1)) {
  if (engine.verifyTokens() < 2 || engine.conversations() < 2)
    throw RuntimeError("speculative decoding of a batch needs an artifact with a verify_batch "
                       "entry point (compile it with kilnc --verify-tokens N --decode-batch M)");
  if (draftTokens < 1)
    throw RuntimeError("speculative decoding drafts at least 1 token a step, got " +
                       std::to_string(draftTokens));
}

void SpeculativeBatch::start(Member &member, const std::vector<int32_t> &prompt, int32_t first) {
  member.drafter->reset();
  member.drafter->append(prompt);
  member.drafter->append({first});
  member.pending = first;
}

std::vector<std::vector<int32_t>> SpeculativeBatch::step(std::vector<Member> &members) {
  const int64_t rows = engine_.verifyTokens();
  std::vector<std::vector<int32_t>> drafts(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    Member &member = members[m];
    // A call writes all `rows` of a conversation (padding included).
    const int64_t left = engine_.contextLength() - engine_.pastTokens(static_cast<int64_t>(m));
    if (member.remaining < 1 || left < rows)
      throw RuntimeError("speculative batch step: conversation " + std::to_string(m) +
                         " has no room (" + std::to_string(member.remaining) + " tokens wanted, " +
                         std::to_string(left) + " positions left, a call writes " +
                         std::to_string(rows) + ")");
    const int64_t limit = std::min(draftTokens_, member.remaining - 1);
    drafts[m] = limit > 0 ? member.drafter->draft(limit) : std::vector<int32_t>{};
    if (static_cast<int64_t>(drafts[m].size()) > limit)
      drafts[m].resize(static_cast<size_t>(limit));
  }
  std::vector<int32_t> pending;
  std::vector<Acceptor> accept;
  for (const Member &member : members) {
    pending.push_back(member.pending);
    accept.push_back(member.accept);
  }
  const std::vector<Verdict> verdicts =
      verifyBatchStep(engine_, pending, drafts, accept, stats_.verifyCalls);
  std::vector<std::vector<int32_t>> yielded(members.size());
  for (size_t m = 0; m < members.size(); ++m) {
    Member &member = members[m];
    const Verdict &verdict = verdicts[m];
    yielded[m].assign(drafts[m].begin(), drafts[m].begin() + verdict.accepted);
    yielded[m].push_back(verdict.next);
    member.drafter->append(yielded[m]);
    member.pending = verdict.next;
    member.remaining -= static_cast<int64_t>(yielded[m].size());
    stats_.drafted += static_cast<int64_t>(drafts[m].size());
    stats_.accepted += verdict.accepted;
    ++stats_.steps;
  }
  return yielded;
}

} // namespace kiln::speculate
