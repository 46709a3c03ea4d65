// What proposes the tokens a verify call checks (speculative decoding). A
// drafter follows the conversation through append() (the prompt, then each
// step's accepted tokens) and guesses what comes next; the target model
// decides. Drafts are deterministic guesses: speculative sampling then keeps
// the target's distribution whatever the drafter proposes (Verification.h).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::speculate {

class Drafter {
public:
  virtual ~Drafter() = default;
  // The conversation's next tokens.
  virtual void append(const std::vector<int32_t> &tokens) = 0;
  // At most `maxTokens` tokens guessed to follow the conversation (maybe
  // none).
  virtual std::vector<int32_t> draft(int64_t maxTokens) = 0;
  // Forgets the conversation.
  virtual void reset() = 0;
};

} // namespace kiln::speculate
