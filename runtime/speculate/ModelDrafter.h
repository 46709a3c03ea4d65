// Drafting with a small model: a draft artifact (kilnc, the same vocabulary,
// a few layers) run by its own engine on the same device guesses greedily,
// one decode call a token. Its caches follow the conversation: drafts the
// target rejected are rolled back, accepted tokens it has not seen are
// prefilled, so each draft costs about one decode call of the draft model
// per drafted token. Compile the draft artifact with kilnc --verify-tokens
// of at least the draft length, which keeps its sliding rings long enough
// to roll back a whole draft.
#pragma once

#include "runtime/engine/Engine.h"
#include "runtime/speculate/Drafter.h"

#include <cstdint>
#include <vector>

namespace kiln::speculate {

class ModelDrafter : public Drafter {
public:
  // `draft` runs conversation `conversation` of its engine. Throws
  // RuntimeError when its vocabulary differs from `vocabSize`, the target's.
  ModelDrafter(Engine &draft, int64_t vocabSize, int64_t conversation = 0);

  void append(const std::vector<int32_t> &tokens) override;
  std::vector<int32_t> draft(int64_t maxTokens) override;
  void reset() override;

private:
  Engine &engine_;
  int64_t conversation_;
  std::vector<int32_t> context_; // the conversation as appended
  std::vector<int32_t> cached_;  // the tokens in the draft engine's caches
  std::vector<float> logits_;    // its logits after cached_ (empty: none yet)
};

} // namespace kiln::speculate
