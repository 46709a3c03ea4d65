// Which drafts a verify call accepts. Greedy: the drafts that match the
// argmax chain, then the first mismatching row's argmax. Sampling: a
// statistical test over many seeds that the tokens speculative sampling
// emits are distributed as the target's own sampler would draw them
// (temperature and top-p), whatever the drafts, good or bad; and a check
// that the test catches a wrong rule (accepting every draft).
#include "runtime/speculate/Verification.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace kiln::speculate {
namespace {

using Tokens = std::vector<int32_t>;

// Rows of logits for a vocabulary of `vocab`, one per row's argmax.
std::vector<float> peaked(const Tokens &argmaxes, int64_t vocab) {
  std::vector<float> logits(argmaxes.size() * static_cast<size_t>(vocab), 0.0f);
  for (size_t r = 0; r < argmaxes.size(); ++r)
    logits[r * static_cast<size_t>(vocab) + static_cast<size_t>(argmaxes[r])] = 5.0f;
  return logits;
}

TEST(VerificationTest, GreedyAcceptsTheArgmaxChain) {
  // Rows' argmaxes 3, 1, 4, 1: drafts 3, 1, 4 all match; the next token is 1.
  std::vector<float> logits = peaked({3, 1, 4, 1}, 6);
  Verdict all = verifyGreedy(logits.data(), 6, {3, 1, 4});
  EXPECT_EQ(all.accepted, 3);
  EXPECT_EQ(all.next, 1);
  // The second draft is wrong: one accepted, and row 1's argmax follows.
  Verdict one = verifyGreedy(logits.data(), 6, {3, 2, 4});
  EXPECT_EQ(one.accepted, 1);
  EXPECT_EQ(one.next, 1);
  // No drafts: row 0 alone.
  Verdict none = verifyGreedy(logits.data(), 6, {});
  EXPECT_EQ(none.accepted, 0);
  EXPECT_EQ(none.next, 3);
  // Temperature 0 samples greedily.
  Sampler greedy;
  Verdict sampled = verifySampled(logits.data(), 6, {3, 2, 4}, greedy);
  EXPECT_EQ(sampled.accepted, 1);
  EXPECT_EQ(sampled.next, 1);
}

// Rows over six tokens: the first emitted token must follow row 0's
// distribution and, when it is the first draft, the second row 1's.
struct Histograms {
  std::vector<double> first, secondAfterDraft;
  int64_t afterDraft = 0;
};

using Rule = Verdict (*)(const float *, int64_t, const Tokens &, Sampler &);

Histograms emitted(const std::vector<float> &logits, const Tokens &drafts,
                   const SamplingOptions &base, int runs, Rule rule) {
  Histograms h{std::vector<double>(6, 0.0), std::vector<double>(6, 0.0)};
  for (int seed = 0; seed < runs; ++seed) {
    SamplingOptions options = base;
    options.seed = static_cast<uint64_t>(seed) * 7919 + 1;
    Sampler sampler(options);
    Verdict v = rule(logits.data(), 6, drafts, sampler);
    // The emitted tokens: the accepted drafts, then next.
    Tokens out(drafts.begin(), drafts.begin() + v.accepted);
    out.push_back(v.next);
    h.first[static_cast<size_t>(out[0])] += 1;
    if (out[0] == drafts[0] && out.size() > 1) {
      h.secondAfterDraft[static_cast<size_t>(out[1])] += 1;
      ++h.afterDraft;
    }
  }
  return h;
}

// Pearson's chi-square statistic of counts against probabilities.
double chiSquare(const std::vector<double> &counts, const std::vector<double> &p) {
  double total = 0, stat = 0;
  for (double c : counts)
    total += c;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      if (counts[i] != 0)
        return INFINITY; // a token the target never draws
      continue;
    }
    const double expected = total * p[i];
    stat += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  return stat;
}

std::vector<double> targetOf(const float *row, const SamplingOptions &options) {
  Sampler sampler(options);
  std::vector<double> p(6, 0.0);
  for (const auto &[probability, token] : sampler.distribution(row, 6))
    p[static_cast<size_t>(token)] = probability;
  return p;
}

// Accepts every draft: what a broken rule would do.
Verdict acceptAll(const float *logits, int64_t vocab, const Tokens &drafts, Sampler &sampler) {
  Verdict v;
  v.accepted = static_cast<int64_t>(drafts.size());
  v.next = sampler.sample(logits + static_cast<int64_t>(drafts.size()) * vocab,
                          static_cast<size_t>(vocab));
  return v;
}

TEST(VerificationTest, SamplingKeepsTheTargetDistribution) {
  // Two drafts: three rows (the bonus row after both).
  const std::vector<float> logits = {1.0f, 2.0f,  0.5f,  2.5f, -1.0f, 1.5f,  // row 0
                                     0.2f, -0.5f, 1.8f,  0.9f, 1.1f,  0.0f,  // row 1
                                     0.7f, 0.1f,  -0.3f, 1.2f, 0.4f,  2.2f}; // row 2
  // 5 degrees of freedom at most: 20.5 is the 0.999 quantile.
  constexpr double kCritical = 20.5;
  constexpr int kRuns = 60000;
  for (SamplingOptions options : {SamplingOptions{0.8, 1.0, 0}, SamplingOptions{1.3, 0.85, 0}}) {
    const std::vector<double> p0 = targetOf(logits.data(), options);
    const std::vector<double> p1 = targetOf(logits.data() + 6, options);
    // A likely draft (3), an unlikely one (4, outside the top-p nucleus
    // where there is one) and a second draft after it.
    for (const Tokens &drafts : {Tokens{3, 2}, Tokens{4, 2}, Tokens{1, 5}}) {
      Histograms h = emitted(logits, drafts, options, kRuns, verifySampled);
      EXPECT_LT(chiSquare(h.first, p0), kCritical) << "first token, drafts " << drafts[0] << ","
                                                   << drafts[1] << ", T " << options.temperature;
      if (h.afterDraft > 1000)
        EXPECT_LT(chiSquare(h.secondAfterDraft, p1), kCritical)
            << "token after the accepted draft " << drafts[0] << ", T " << options.temperature;
    }
  }
  // The test sees a rule that accepts every draft.
  const SamplingOptions options{0.8, 1.0, 0};
  Histograms broken = emitted(logits, {4, 2}, options, kRuns, acceptAll);
  EXPECT_GT(chiSquare(broken.first, targetOf(logits.data(), options)), 1000.0);
}

} // namespace
} // namespace kiln::speculate
