// Sampler: greedy ties, the top-p nucleus, temperature, and seeded
// reproducibility, on hand-made logits.
#include "runtime/engine/Sampler.h"

#include "runtime/cpu/RuntimeError.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace kiln {
namespace {

// Logits whose softmax (T = 1) is exactly proportional to `probabilities`.
std::vector<float> logitsOf(const std::vector<double> &probabilities) {
  std::vector<float> logits;
  for (double p : probabilities)
    logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

std::map<int32_t, int> histogram(Sampler &sampler, const std::vector<float> &logits, int draws) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < draws; ++i)
    ++counts[sampler.sample(logits)];
  return counts;
}

TEST(Sampler, ArgmaxLowestIndexOnTies) {
  const std::vector<float> logits = {1, 3, 2, 3, -1};
  EXPECT_EQ(argmax(logits.data(), logits.size()), 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> withNan = {nan, -5, nan, -2};
  EXPECT_EQ(argmax(withNan.data(), withNan.size()), 3);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> allLow = {-inf, -inf};
  EXPECT_EQ(argmax(allLow.data(), allLow.size()), 0);
  EXPECT_EQ(argmax(nullptr, 0), 0);
  // A row of NaN only is the model failing, not token 0.
  const std::vector<float> allNan = {nan, nan, nan};
  EXPECT_THROW(argmax(allNan.data(), allNan.size()), RuntimeError);
  Sampler sampling({1.0, 0.9, 3});
  EXPECT_THROW(sampling.sample(allNan), RuntimeError);
}

TEST(Sampler, TemperatureZeroIsGreedy) {
  Sampler sampler({0.0, 0.9, 7});
  const std::vector<float> logits = {0.5f, 2.0f, 2.0f, 1.0f};
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(sampler.sample(logits), 1);
  Sampler negative({-1.0, 1.0, 7});
  EXPECT_EQ(negative.sample(logits), 1);
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  const std::vector<float> logits = logitsOf({0.5, 0.3, 0.15, 0.05});
  {
    // 0.5 + 0.3 = 0.8 >= 0.79: tokens 0 and 1 only.
    Sampler sampler({1.0, 0.79, 1});
    auto counts = histogram(sampler, logits, 20000);
    EXPECT_EQ(counts.count(2), 0u);
    EXPECT_EQ(counts.count(3), 0u);
    // Renormalised within the nucleus: 0.5 / 0.8.
    EXPECT_NEAR(counts[0] / 20000.0, 0.625, 0.02);
  }
  {
    // 0.8 < 0.81: token 2 joins, token 3 stays out.
    Sampler sampler({1.0, 0.81, 2});
    auto counts = histogram(sampler, logits, 20000);
    EXPECT_GT(counts[2], 0);
    EXPECT_EQ(counts.count(3), 0u);
    EXPECT_NEAR(counts[2] / 20000.0, 0.15 / 0.95, 0.02);
  }
  {
    // Tiny p: the top token alone, whatever the draw.
    Sampler sampler({1.0, 1e-6, 3});
    auto counts = histogram(sampler, logits, 500);
    EXPECT_EQ(counts.size(), 1u);
    EXPECT_EQ(counts[0], 500);
  }
  {
    // p = 1 keeps everything, even the 5% token.
    Sampler sampler({1.0, 1.0, 4});
    auto counts = histogram(sampler, logits, 20000);
    EXPECT_NEAR(counts[3] / 20000.0, 0.05, 0.01);
  }
}

// A nucleus larger than the first sorting round; equal probabilities are
// ranked by token, so the nucleus is the lowest half.
TEST(Sampler, LargeNucleusWithTies) {
  const std::vector<float> logits(1000, 0.25f);
  Sampler sampler({0.7, 0.5, 5});
  auto counts = histogram(sampler, logits, 5000);
  EXPECT_LT(counts.rbegin()->first, 500);
  EXPECT_GT(counts.size(), 400u);
}

TEST(Sampler, TemperatureFlattensAndSharpens) {
  const std::vector<float> logits = {2.0f, 0.0f};
  const double atOne = std::exp(2.0) / (1 + std::exp(2.0)); // 0.881
  Sampler one({1.0, 1.0, 11});
  EXPECT_NEAR(histogram(one, logits, 20000)[0] / 20000.0, atOne, 0.015);
  Sampler hot({100.0, 1.0, 11});
  EXPECT_NEAR(histogram(hot, logits, 20000)[0] / 20000.0, 0.505, 0.02);
  Sampler cold({0.1, 1.0, 11}); // e^-20: never the second token
  EXPECT_EQ(histogram(cold, logits, 2000)[0], 2000);
}

TEST(Sampler, SameSeedSameSamples) {
  const std::vector<float> logits = {0.1f, 0.4f, 0.3f, 0.2f, 0.0f, 0.35f};
  auto draw = [&](uint64_t seed) {
    Sampler sampler({0.8, 0.95, seed});
    std::vector<int32_t> tokens;
    for (int i = 0; i < 200; ++i)
      tokens.push_back(sampler.sample(logits));
    return tokens;
  };
  EXPECT_EQ(draw(42), draw(42));
  EXPECT_NE(draw(42), draw(43));
}

TEST(Sampler, NanAndInfinityGetNoMass) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {nan, 1.0f, -inf, 1.0f};
  Sampler sampler({1.0, 1.0, 9});
  auto counts = histogram(sampler, logits, 2000);
  EXPECT_EQ(counts.count(0), 0u);
  EXPECT_EQ(counts.count(2), 0u);
  EXPECT_GT(counts[1], 800);
  EXPECT_GT(counts[3], 800);
}

TEST(Sampler, RejectsBadOptions) {
  EXPECT_THROW(Sampler({1.0, 0.0, 0}), RuntimeError);
  EXPECT_THROW(Sampler({1.0, 1.5, 0}), RuntimeError);
  EXPECT_THROW(Sampler({1.0, std::nan(""), 0}), RuntimeError);
  EXPECT_THROW(Sampler({std::numeric_limits<double>::infinity(), 1.0, 0}), RuntimeError);
}

TEST(Random, KnownXoshiroStream) {
  // Deterministic across platforms: the first outputs for seed 0.
  Xoshiro256 a(0), b(0);
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(a.next(), b.next());
  uint64_t state = 0;
  EXPECT_EQ(splitMix64(state), 0xe220a8397b1dcdafULL);
  Xoshiro256 c(1);
  for (int i = 0; i < 1000; ++i) {
    const double u = c.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

} // namespace
} // namespace kiln
