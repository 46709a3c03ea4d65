#include "runtime/engine/Sampler.h"

#include "runtime/cpu/RuntimeError.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace kiln {
namespace {

// Most probable first; equal probabilities: lowest token first, so the
// nucleus is the same on every platform.
bool moreProbable(const std::pair<double, int32_t> &a, const std::pair<double, int32_t> &b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Candidates sorted per round of the nucleus search: most rows need far fewer
// than the whole vocabulary.
constexpr size_t kFirstNucleusGuess = 64;

} // namespace

int32_t argmax(const float *logits, size_t count) {
  int32_t best = 0;
  float bestValue = -std::numeric_limits<float>::infinity();
  bool found = false;
  for (size_t i = 0; i < count; ++i) {
    const float value = logits[i];
    if (std::isnan(value))
      continue;
    if (!found || value > bestValue) {
      best = static_cast<int32_t>(i);
      bestValue = value;
      found = true;
    }
  }
  if (!found && count > 0)
    throw RuntimeError(allNanLogits(static_cast<int64_t>(count)));
  return best;
}

std::string allNanLogits(int64_t count) {
  return "every one of the " + std::to_string(count) +
         " logits is NaN: the model computed no number (a non-finite weight or activation), so "
         "no token can be chosen";
}

Sampler::Sampler(const SamplingOptions &options) : options_(options), rng_(options.seed) {
  if (!std::isfinite(options.temperature))
    throw RuntimeError("temperature " + std::to_string(options.temperature) +
                       " is not a finite number");
  if (!(options.topP > 0.0 && options.topP <= 1.0))
    throw RuntimeError("top-p " + std::to_string(options.topP) + " is outside (0, 1]");
}

double Sampler::nucleus(const float *logits, size_t count, size_t &kept) {
  kept = 0;
  // Softmax numerators exp((l - max) / T) in double; NaN gets no mass.
  const float maxLogit = logits[argmax(logits, count)];
  if (!std::isfinite(maxLogit))
    return 0.0;
  const double inverseT = 1.0 / options_.temperature;
  candidates_.resize(count);
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) {
    const double weight =
        std::isnan(logits[i]) ? 0.0 : std::exp((double{logits[i]} - maxLogit) * inverseT);
    candidates_[i] = {weight, static_cast<int32_t>(i)};
    total += weight;
  }

  // The nucleus: the smallest prefix of the sorted candidates whose mass
  // reaches topP; sort more of them only when the prefix falls short.
  kept = count;
  if (options_.topP >= 1.0)
    return total;
  const double target = options_.topP * total;
  size_t sorted = 0;
  double mass = 0.0;
  size_t guess = std::min(count, kFirstNucleusGuess);
  for (;;) {
    std::partial_sort(candidates_.begin() + sorted, candidates_.begin() + guess, candidates_.end(),
                      moreProbable);
    for (; sorted < guess && mass < target; ++sorted)
      mass += candidates_[sorted].first;
    if (mass >= target || guess == count)
      break;
    guess = std::min(count, guess * 4);
  }
  kept = sorted;
  return mass;
}

int32_t Sampler::sample(const float *logits, size_t count) {
  if (options_.temperature <= 0.0 || count <= 1)
    return argmax(logits, count);
  size_t kept = 0;
  const double keptMass = nucleus(logits, count, kept);
  if (keptMass <= 0.0)
    return argmax(logits, count);
  double u = rng_.uniform() * keptMass;
  for (size_t i = 0; i < kept; ++i) {
    u -= candidates_[i].first;
    if (u < 0.0)
      return candidates_[i].second;
  }
  // Rounding left a sliver: the last token with any mass.
  for (size_t i = kept; i-- > 0;)
    if (candidates_[i].first > 0.0)
      return candidates_[i].second;
  return argmax(logits, count);
}

std::vector<std::pair<double, int32_t>> Sampler::distribution(const float *logits, size_t count) {
  if (options_.temperature <= 0.0 || count <= 1)
    return {{1.0, argmax(logits, count)}};
  size_t kept = 0;
  const double mass = nucleus(logits, count, kept);
  if (mass <= 0.0)
    return {{1.0, argmax(logits, count)}};
  std::vector<std::pair<double, int32_t>> result;
  result.reserve(kept);
  for (size_t i = 0; i < kept; ++i)
    if (candidates_[i].first > 0.0)
      result.emplace_back(candidates_[i].first / mass, candidates_[i].second);
  return result;
}

} // namespace kiln
