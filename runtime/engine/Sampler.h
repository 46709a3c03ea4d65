// Picks the next token from a row of logits: greedy (argmax) or temperature
// sampling restricted to the top-p nucleus, with a seeded generator so that
// a seed reproduces a run.
#pragma once

#include "runtime/engine/Random.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kiln {

struct SamplingOptions {
  // <= 0: greedy.
  double temperature = 0.0;
  // Keep the smallest set of most probable tokens whose mass is >= topP;
  // >= 1 keeps every token.
  double topP = 1.0;
  uint64_t seed = 0;
};

// Index of the largest logit, the lowest index on ties; NaN counts as the
// smallest value. 0 for an empty row; throws RuntimeError for a row of NaN
// only (the model computed nothing to choose from: not token 0).
int32_t argmax(const float *logits, size_t count);
// The refusal of a row of `count` logits that are all NaN (argmax's, and the
// GPU's greedy choice's).
std::string allNanLogits(int64_t count);

class Sampler {
public:
  // Throws RuntimeError for topP outside (0, 1] or a non-finite temperature.
  explicit Sampler(const SamplingOptions &options = {});

  const SamplingOptions &options() const { return options_; }
  int32_t sample(const float *logits, size_t count);
  int32_t sample(const std::vector<float> &logits) { return sample(logits.data(), logits.size()); }

  // What sample() draws from, for a temperature above 0: the nucleus as
  // (probability, token), the probabilities summing to 1. Speculative
  // sampling weighs drafts against it.
  std::vector<std::pair<double, int32_t>> distribution(const float *logits, size_t count);
  // A draw from [0, 1) of the sampler's generator.
  double uniform() { return rng_.uniform(); }

private:
  // Fills candidates_ with the nucleus' (weight, token) in its first `kept`
  // entries and returns their total weight; 0 when no token has mass.
  double nucleus(const float *logits, size_t count, size_t &kept);

  SamplingOptions options_;
  Xoshiro256 rng_;
  // Reused between calls: (probability, token), most probable first.
  std::vector<std::pair<double, int32_t>> candidates_;
};

} // namespace kiln
