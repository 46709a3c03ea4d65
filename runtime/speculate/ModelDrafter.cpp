#include "runtime/speculate/ModelDrafter.h"

#include "runtime/cpu/RuntimeError.h"
#include "runtime/engine/Sampler.h"

#include <algorithm>
#include <string>

namespace kiln::speculate {

ModelDrafter::ModelDrafter(Engine &draft, int64_t vocabSize, int64_t conversation)
    : engine_(draft), conversation_(conversation) {
  if (draft.vocabSize() != vocabSize)
    throw RuntimeError("the draft model's vocabulary has " + std::to_string(draft.vocabSize()) +
                       " tokens, the target's " + std::to_string(vocabSize) +
                       ": a draft model must share the target's vocabulary");
}

void ModelDrafter::append(const std::vector<int32_t> &tokens) {
  context_.insert(context_.end(), tokens.begin(), tokens.end());
}

void ModelDrafter::reset() {
  context_.clear();
  cached_.clear();
  logits_.clear();
  engine_.forget(conversation_);
}

std::vector<int32_t> ModelDrafter::draft(int64_t maxTokens) {
  // Bring the caches to the conversation: drop the drafts it did not take,
  // then run what it took that they lack.
  const size_t common = static_cast<size_t>(
      std::mismatch(cached_.begin(), cached_.end(), context_.begin(), context_.end()).first -
      cached_.begin());
  if (common < cached_.size()) {
    engine_.rollback(conversation_, static_cast<int64_t>(common));
    cached_.resize(common);
    logits_.clear();
  }
  if (cached_.size() < context_.size()) {
    const std::vector<int32_t> missing(context_.begin() + static_cast<std::ptrdiff_t>(common),
                                       context_.end());
    logits_ = engine_.prefill(conversation_, missing);
    cached_ = context_;
  }
  std::vector<int32_t> drafts;
  if (logits_.empty() || maxTokens < 1)
    return drafts;
  // Greedy guesses; the last one is not run (the next draft may not need it).
  const int64_t room = engine_.contextLength() - engine_.pastTokens(conversation_);
  const int64_t count = std::min(maxTokens, room + 1);
  for (int64_t i = 0; i < count; ++i) {
    drafts.push_back(argmax(logits_.data(), logits_.size()));
    if (i + 1 < count) {
      logits_ = engine_.decode(conversation_, drafts.back());
      cached_.push_back(drafts.back());
    }
  }
  return drafts;
}

} // namespace kiln::speculate
