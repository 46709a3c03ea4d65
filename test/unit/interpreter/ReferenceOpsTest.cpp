// Hand-computable cases for the interpreter's op semantics.
#include "compiler/interpreter/ReferenceOps.h"

#include <gtest/gtest.h>

#include <cmath>

namespace kiln::interp {
namespace {

HostTensor positions(int64_t n) {
  std::vector<int32_t> p(n);
  for (int64_t i = 0; i < n; ++i)
    p[i] = static_cast<int32_t>(i);
  return HostTensor::ints({n}, p);
}

// With q = 0 every visible key gets the same score, so the output is the mean
// of the visible values: the window and the causal mask can be read off it.
TEST(Attention, SlidingWindowSeesExactlyTheLastWPositions) {
  int64_t T = 6;
  HostTensor q = HostTensor::floats({T, 1, 2});
  HostTensor k = HostTensor::floats({T, 1, 2});
  HostTensor v = HostTensor::floats({T, 1, 1});
  for (int64_t j = 0; j < T; ++j)
    v.f[j] = float(j + 1); // values 1..6
  HostTensor global = attention(q, k, v, positions(T), 1.0, std::nullopt);
  HostTensor window3 = attention(q, k, v, positions(T), 1.0, 3);
  for (int64_t t = 0; t < T; ++t) {
    // Global: mean of 1..t+1.
    EXPECT_FLOAT_EQ(global.f[t], float(t + 2) / 2) << t;
    // Window 3: keys j with t - 3 < j <= t.
    int64_t first = std::max<int64_t>(0, t - 2);
    float mean = 0;
    for (int64_t j = first; j <= t; ++j)
      mean += float(j + 1);
    EXPECT_FLOAT_EQ(window3.f[t], mean / float(t - first + 1)) << t;
  }
}

// Tensor-core numerics: q, k, v and the numerators rounded to bf16. With
// two keys of scores 0 and 1 the numerators are exp(-1) and 1 (relative to
// the max): exp(-1) rounds to 0.3671875 (bf16 keeps 8 bits) while the sum
// stays exact, and the value 1/3 rounds to 0.333984375.
TEST(Attention, Bf16ProductsRoundInputsAndNumerators) {
  HostTensor q = HostTensor::floats({2, 1, 1}, {1, 1});
  HostTensor k = HostTensor::floats({2, 1, 1}, {0, 1});
  HostTensor v = HostTensor::floats({2, 1, 1}, {1.0f / 3, 2});
  HostTensor exact = attention(q, k, v, positions(2), 1.0, std::nullopt);
  HostTensor rounded = attention(q, k, v, positions(2), 1.0, std::nullopt, true);
  const double r = std::exp(-1.0), third = 0.333984375; // bf16(1/3)
  EXPECT_NEAR(exact.f[1], (r / 3 + 2) / (1 + r), 1e-6);
  EXPECT_NEAR(rounded.f[1], (0.3671875 * third + 2) / (1 + r), 1e-6);
  EXPECT_NE(exact.f[1], rounded.f[1]);
  // One visible key: the numerator is exactly 1 either way.
  EXPECT_FLOAT_EQ(rounded.f[0], float(third));
}

TEST(Attention, WindowFollowsPositionsNotIndices) {
  // Positions 10, 11, 15: with window 4, position 15 sees only itself
  // (15 - 4 < j requires j > 11).
  HostTensor q = HostTensor::floats({3, 1, 1});
  HostTensor k = HostTensor::floats({3, 1, 1});
  HostTensor v = HostTensor::floats({3, 1, 1}, {1, 2, 7});
  HostTensor out = attention(q, k, v, HostTensor::ints({3}, {10, 11, 15}), 1.0, 4);
  EXPECT_FLOAT_EQ(out.f[0], 1);
  EXPECT_FLOAT_EQ(out.f[1], 1.5);
  EXPECT_FLOAT_EQ(out.f[2], 7);
}

TEST(Attention, GroupedQueryHeadsReadTheirKvHead) {
  // 4 query heads, 2 KV heads: heads 0,1 read KV head 0, heads 2,3 KV head 1.
  HostTensor q = HostTensor::floats({1, 4, 1});
  HostTensor k = HostTensor::floats({1, 2, 1});
  HostTensor v = HostTensor::floats({1, 2, 1}, {3, -5});
  HostTensor out = attention(q, k, v, positions(1), 1.0, std::nullopt);
  EXPECT_EQ(out.f, (std::vector<float>{3, 3, -5, -5}));
}

TEST(Attention, SoftmaxOfScaledScores) {
  // One query against two keys with scores 0 and 2*scale.
  HostTensor q = HostTensor::floats({2, 1, 1}, {1, 1});
  HostTensor k = HostTensor::floats({2, 1, 1}, {0, 2});
  HostTensor v = HostTensor::floats({2, 1, 1}, {10, 20});
  HostTensor out = attention(q, k, v, positions(2), 0.5, std::nullopt);
  double p1 = std::exp(1.0) / (1 + std::exp(1.0));
  EXPECT_NEAR(out.f[1], 10 * (1 - p1) + 20 * p1, 1e-5);
  EXPECT_FLOAT_EQ(out.f[0], 10); // causal: token 0 sees only itself
}

TEST(RouterTopK, RenormalisesTheSelectedProbabilities) {
  // logits ln(1), ln(2), ln(3), ln(4): p = .1 .2 .3 .4; top-2 = 3, 2 -> 4/7, 3/7.
  HostTensor logits =
      HostTensor::floats({1, 4}, {0.0f, std::log(2.0f), std::log(3.0f), std::log(4.0f)});
  TopK top = routerTopK(logits, 2);
  EXPECT_EQ(top.indices.i, (std::vector<int32_t>{3, 2}));
  EXPECT_NEAR(top.weights.f[0], 4.0 / 7, 1e-6);
  EXPECT_NEAR(top.weights.f[1], 3.0 / 7, 1e-6);
}

TEST(RouterTopK, TiesGoToTheLowerIndex) {
  TopK top = routerTopK(HostTensor::floats({1, 4}, {1, 5, 5, 5}), 2);
  EXPECT_EQ(top.indices.i, (std::vector<int32_t>{1, 2}));
}

TEST(Rope, RotatesPairsJAndJPlusHalf) {
  // D = 4: pairs (0, 2) with frequency 1 and (1, 3) with theta^-1/2.
  HostTensor x = HostTensor::floats({1, 1, 4}, {1, 0, 0, 1});
  HostTensor out = rope(x, HostTensor::ints({1}, {2}), 100.0);
  EXPECT_NEAR(out.f[0], std::cos(2.0), 1e-6);
  EXPECT_NEAR(out.f[2], std::sin(2.0), 1e-6);
  EXPECT_NEAR(out.f[1], -std::sin(0.2), 1e-6);
  EXPECT_NEAR(out.f[3], std::cos(0.2), 1e-6);
}

TEST(RmsNorm, MatchesTheFormula) {
  HostTensor x = HostTensor::floats({1, 2}, {3, 4});
  HostTensor w = HostTensor::floats({2}, {1, 2});
  HostTensor out = rmsNorm(x, w, 0.0);
  double rms = std::sqrt((9.0 + 16.0) / 2);
  EXPECT_NEAR(out.f[0], 3 / rms, 1e-6);
  EXPECT_NEAR(out.f[1], 2 * 4 / rms, 1e-6);
}

// The model normalises each expert's output with that expert's weight before
// the weighted sum. Two experts whose outputs differ in scale by 100x: per
// expert, both count equally; normalising the sum instead lets the large one
// dominate. The test pins the first and would fail on the second.
TEST(LatentMoE, PerExpertNormComesBeforeTheWeightedSum) {
  HostTensor y = HostTensor::floats({1, 2, 2}, {1, 0, 0, 100});
  HostTensor idx = HostTensor::ints({1, 2}, {0, 1});
  HostTensor w = HostTensor::floats({2, 2}, {1, 1, 1, 1});
  HostTensor weights = HostTensor::floats({1, 2}, {0.5f, 0.5f});
  HostTensor out = combine(expertNorm(y, idx, w, 0.0), weights);
  double s = std::sqrt(2.0); // each normalised row is (sqrt2, 0) or (0, sqrt2)
  EXPECT_NEAR(out.f[0], 0.5 * s, 1e-5);
  EXPECT_NEAR(out.f[1], 0.5 * s, 1e-5);
  // Normalising the sum (0.5, 50) would give about (0.014, 1.414).
  HostTensor wrong = rmsNorm(combine(y, weights), HostTensor::floats({2}, {1, 1}), 0.0);
  EXPECT_GT(std::abs(wrong.f[0] - out.f[0]), 0.5);
}

TEST(LatentMoE, EachTokenUsesItsOwnExperts) {
  // Expert e's matrices are e+1 times identity-like: down(silu(g z) * u z).
  int64_t L = 2, I = 2;
  HostTensor z = HostTensor::floats({1, L}, {1, 1});
  HostTensor gate = HostTensor::floats({2, I, L}, {1, 0, 0, 1, 2, 0, 0, 2});
  HostTensor up = gate;
  HostTensor down = gate;
  HostTensor y = expertSwiGLU(z, HostTensor::ints({1, 2}, {1, 0}), gate, up, down);
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  EXPECT_NEAR(y.f[0], 2 * silu(2) * 2, 1e-5); // slot 0: expert 1
  EXPECT_NEAR(y.f[2], 1 * silu(1) * 1, 1e-5); // slot 1: expert 0
}

// As the tensor-core expert GEMMs read them: z and the SwiGLU row rounded to
// bf16 before their products, nothing else.
TEST(LatentMoE, Bf16InputsRoundZAndTheSwiGLURow) {
  HostTensor z = HostTensor::floats({1, 1}, {1.0f + 0x1p-10f}); // not a bf16
  HostTensor gate = HostTensor::floats({1, 1, 1}, {1.0f});
  HostTensor up = HostTensor::floats({1, 1, 1}, {3.0f});
  HostTensor down = HostTensor::floats({1, 1, 1}, {1.0f});
  HostTensor idx = HostTensor::ints({1, 1}, {0});
  auto silu = [](float x) { return x / (1.0f + std::exp(-x)); };
  auto bf16 = [](float x) { return roundToBf16(HostTensor::floats({1}, {x})).f[0]; };
  float exact = silu(z.f[0]) * 3.0f * z.f[0];
  float zr = bf16(z.f[0]); // 1.0
  float rounded = bf16(silu(zr) * 3.0f * zr);
  ASSERT_NE(exact, rounded);
  EXPECT_FLOAT_EQ(expertSwiGLU(z, idx, gate, up, down).f[0], exact);
  EXPECT_FLOAT_EQ(expertSwiGLU(z, idx, gate, up, down, /*bf16Inputs=*/true).f[0], rounded);
  // The fused stage alike: with eps 1 its norm keeps the row's size.
  HostTensor post = HostTensor::floats({1, 1}, {1.0f});
  ExpertStacks stacks{&gate, &up, &down, &post};
  HostTensor weights = HostTensor::floats({1, 1}, {1.0f});
  auto norm = [](float y) { return y / std::sqrt(y * y + 1.0f); };
  EXPECT_FLOAT_EQ(megaMoE(z, idx, weights, {stacks}, 1, 1.0).f[0], norm(exact));
  EXPECT_FLOAT_EQ(megaMoE(z, idx, weights, {stacks}, 1, 1.0, true).f[0], norm(rounded));
}

TEST(Embed, RejectsIdsOutsideTheVocabulary) {
  HostTensor table = HostTensor::floats({4, 2});
  EXPECT_THROW(embed(table, HostTensor::ints({1}, {4})), InterpreterError);
}

TEST(Nvfp4Dequant, AppliesBlockAndGlobalScales) {
  // One row of 16: codes 1 (0.5) and 7 (6.0) alternating, scale e4m3 2.0, global 0.25.
  HostTensor packed = HostTensor::ints({1, 8}, std::vector<int32_t>(8, 0x71));
  HostTensor scales = HostTensor::floats({1, 1}, {2.0f});
  HostTensor global = HostTensor::floats({}, {0.25f});
  HostTensor out = nvfp4Dequant(packed, scales, global);
  ASSERT_EQ(out.shape, (std::vector<int64_t>{1, 16}));
  EXPECT_FLOAT_EQ(out.f[0], 0.5f * 2 * 0.25f); // low nibble first
  EXPECT_FLOAT_EQ(out.f[1], 6.0f * 2 * 0.25f);
}

} // namespace
} // namespace kiln::interp

namespace kiln::interp {
namespace {

// What a tensor core reads of f32 activations: round to nearest even at 8
// significant bits (7 stored), ties to the even mantissa.
TEST(RoundToBf16, RoundsToNearestEven) {
  HostTensor x = HostTensor::floats({1, 6});
  x.f = {1.0f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-9f, -2.5f, 1.0f + 0x1p-7f};
  HostTensor y = roundToBf16(x);
  EXPECT_EQ(y.f[0], 1.0f);           // exact
  EXPECT_EQ(y.f[1], 1.0f);           // a tie, to the even 1.0
  EXPECT_EQ(y.f[2], 1.0f + 0x1p-6f); // a tie, to the even 1 + 2^-6
  EXPECT_EQ(y.f[3], 1.0f);           // below half an ulp
  EXPECT_EQ(y.f[4], -2.5f);          // exact
  EXPECT_EQ(y.f[5], 1.0f + 0x1p-7f); // one ulp: exact
  EXPECT_EQ(y.shape, x.shape);
}

} // namespace
} // namespace kiln::interp
