#include "runtime/speculate/ScriptedDrafter.h"

namespace kiln::speculate {

ScriptedDrafter::ScriptedDrafter(std::vector<int32_t> continuation, size_t promptLength,
                                 int32_t vocab)
    : continuation_(std::move(continuation)), promptLength_(promptLength), vocab_(vocab) {}

std::vector<int32_t> ScriptedDrafter::draft(int64_t maxTokens) {
  std::vector<int32_t> drafts;
  if (seen_ < promptLength_)
    return drafts;
  const size_t at = seen_ - promptLength_; // the next token's index in the continuation
  for (size_t i = at; i < continuation_.size() && static_cast<int64_t>(drafts.size()) < maxTokens;
       ++i)
    drafts.push_back(continuation_[i]);
  if (!drafts.empty() && at % 3 != 0) {
    int32_t &wrong = drafts[(at * 5) % drafts.size()];
    wrong = (wrong + 1) % vocab_;
  }
  return drafts;
}

} // namespace kiln::speculate
