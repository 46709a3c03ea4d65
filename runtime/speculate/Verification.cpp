#include "runtime/speculate/Verification.h"

#include <cstddef>

namespace kiln::speculate {
namespace {

const float *row(const float *logits, int64_t vocab, size_t i) {
  return logits + static_cast<int64_t>(i) * vocab;
}

// A draw from `p` without `excluded`, renormalised; `p` sums to 1.
int32_t drawWithout(const std::vector<std::pair<double, int32_t>> &p, int32_t excluded,
                    double excludedMass, double u) {
  double left = u * (1.0 - excludedMass);
  int32_t last = -1;
  for (const auto &[probability, token] : p) {
    if (token == excluded)
      continue;
    last = token;
    left -= probability;
    if (left < 0.0)
      return token;
  }
  // Rounding left a sliver: the last token with mass.
  return last;
}

} // namespace

Verdict verifyGreedy(const float *logits, int64_t vocab, const std::vector<int32_t> &drafts) {
  Verdict verdict;
  for (size_t i = 0;; ++i) {
    const int32_t best = argmax(row(logits, vocab, i), static_cast<size_t>(vocab));
    if (i == drafts.size() || drafts[i] != best) {
      verdict.next = best;
      return verdict;
    }
    ++verdict.accepted;
  }
}

Verdict verifySampled(const float *logits, int64_t vocab, const std::vector<int32_t> &drafts,
                      Sampler &sampler) {
  if (sampler.options().temperature <= 0.0)
    return verifyGreedy(logits, vocab, drafts);
  Verdict verdict;
  for (size_t i = 0; i < drafts.size(); ++i) {
    const std::vector<std::pair<double, int32_t>> p =
        sampler.distribution(row(logits, vocab, i), static_cast<size_t>(vocab));
    double draftMass = 0.0;
    for (const auto &[probability, token] : p)
      if (token == drafts[i])
        draftMass = probability;
    if (sampler.uniform() < draftMass) {
      ++verdict.accepted;
      continue;
    }
    // Rejected: the rest of p. A draft the nucleus held all of cannot be
    // rejected (u < 1), so something remains.
    verdict.next = drawWithout(p, drafts[i], draftMass, sampler.uniform());
    return verdict;
  }
  verdict.next = sampler.sample(row(logits, vocab, drafts.size()), static_cast<size_t>(vocab));
  return verdict;
}

Acceptor samplingAcceptor(Sampler &sampler) {
  return [&sampler](const float *logits, int64_t vocab, const std::vector<int32_t> &drafts) {
    return verifySampled(logits, vocab, drafts, sampler);
  };
}

} // namespace kiln::speculate
