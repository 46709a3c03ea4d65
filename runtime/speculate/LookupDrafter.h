// Drafting by lookup in the conversation's own tokens (prompt lookup,
// n-gram drafting): replies that copy their context (a file rewritten with
// small changes, tool output quoted back) repeat what came before, so the
// tokens that followed the last earlier occurrence of the conversation's
// final n tokens are a good guess at what follows now. The longest n from
// maxNgram down to minNgram that occurs earlier wins; its most recent
// occurrence gives at most maxDraft tokens.
//
// The index is incremental: append() adds the tokens a step accepted, and
// each draft costs O(maxNgram) lookups, whatever the conversation's length.
// A verify step (issue 23) checks the draft against the target model; the
// drafter itself never changes what is generated.
#pragma once

#include "runtime/speculate/Drafter.h"

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace kiln::speculate {

struct LookupOptions {
  int minNgram = 2; // the shortest suffix worth matching
  int maxNgram = 4;
  int maxDraft = 8; // tokens drafted at most
};

class LookupDrafter : public Drafter {
public:
  // Throws std::invalid_argument unless 1 <= minNgram <= maxNgram <= 64 and
  // 1 <= maxDraft <= 256.
  explicit LookupDrafter(LookupOptions options = {});

  // The conversation's next tokens (the prompt first, then each step's
  // accepted tokens).
  void append(const std::vector<int32_t> &tokens) override;
  void append(int32_t token);
  // Forgets the conversation (a rejected draft is never appended, so there
  // is nothing to roll back).
  void reset() override;

  // Up to maxDraft tokens that followed the latest earlier occurrence of the
  // longest suffix of the conversation that occurred before; empty if none.
  std::vector<int32_t> draft() const;
  // The same, at most `maxTokens` of them.
  std::vector<int32_t> draft(int64_t maxTokens) override;

  const std::vector<int32_t> &tokens() const { return tokens_; }

private:
  uint64_t key(size_t end, int n) const; // the n tokens ending before `end`

  LookupOptions options_;
  std::vector<int32_t> tokens_;
  // Per n-gram length: hash of an n-gram -> the positions just past its
  // occurrences, latest last (hash collisions are checked on use).
  std::vector<std::unordered_map<uint64_t, std::vector<uint32_t>>> index_;
};

} // namespace kiln::speculate
