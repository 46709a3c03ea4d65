// A drafter for checking speculative decoding: it knows the continuation
// (from a run without speculation) and drafts it, wrong at one place in two
// steps of three (a place that moves with the position), so that a check
// sees every count of accepted drafts and rollbacks of every length. With
// greedy verification the output must be the continuation itself.
#pragma once

#include "runtime/speculate/Drafter.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::speculate {

class ScriptedDrafter : public Drafter {
public:
  // `continuation` follows a prompt of `promptLength` tokens; wrong drafts
  // take the next id modulo `vocab`.
  ScriptedDrafter(std::vector<int32_t> continuation, size_t promptLength, int32_t vocab);

  void append(const std::vector<int32_t> &tokens) override { seen_ += tokens.size(); }
  std::vector<int32_t> draft(int64_t maxTokens) override;
  void reset() override { seen_ = 0; }

private:
  std::vector<int32_t> continuation_;
  size_t promptLength_, seen_ = 0;
  int32_t vocab_;
};

} // namespace kiln::speculate
