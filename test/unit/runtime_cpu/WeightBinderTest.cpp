// WeightBinder: names of expert stacks, the TP slice, the AMX VNNI layout
// (against a naive reference and against what tdpbf16ps computes), binding
// from checkpoints and synthetic weights, and every mismatch error.
#include "runtime/engine/WeightBinder.h"

#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/SyntheticWeights.h"
#include "runtime/artifact/ModelFacts.h"
#include "runtime/core/Float.h"
#include "runtime/cpu/RuntimeError.h"
#include "runtime/cpu/ThreadPool.h"
#include "runtime/engine/WeightLayout.h"
#include "runtime/engine/WeightSource.h"
#include "runtime/safetensors/Checkpoint.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

namespace kiln {
namespace {

using muse_spark::Config;
using muse_spark::WeightFormat;

template <typename Fn> std::string runtimeErrorOf(Fn &&fn) {
  try {
    fn();
  } catch (const RuntimeError &error) {
    return error.what();
  }
  ADD_FAILURE() << "expected RuntimeError";
  return "";
}

#define EXPECT_HAS(text, part)                                                                     \
  EXPECT_NE(std::string(text).find(part), std::string::npos)                                       \
      << "missing \"" << part << "\" in: " << text

Config tinyConfig() { return muse_spark::loadConfig("muse-spark-tiny"); }

std::string tinyConfigJson() { return *muse_spark::builtinConfigText("muse-spark-tiny"); }

std::vector<uint8_t> synthesize(const Config &config, const std::string &name, uint64_t seed) {
  for (const auto &spec : muse_spark::checkpointManifest(config, WeightFormat::BF16))
    if (spec.name == name) {
      int64_t bytes = dtypeSize(spec.dtype);
      for (int64_t size : spec.shape)
        bytes *= size;
      std::vector<uint8_t> out(bytes);
      muse_spark::synthesizeTensor(config, spec, seed, out.data());
      return out;
    }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

// The layout exactly as docs/runtime-abi.md words it: block (n, k) at index
// n * K/32 + k; row r, column 2c + p of a block holds W[16n + c][32k + 2r + p].
std::vector<uint16_t> naiveVnni(const std::vector<uint16_t> &w, int64_t N, int64_t K) {
  std::vector<uint16_t> out(w.size(), 0xFFFF);
  for (int64_t n = 0; n < N / 16; ++n)
    for (int64_t k = 0; k < K / 32; ++k)
      for (int64_t r = 0; r < 16; ++r)
        for (int64_t c = 0; c < 16; ++c)
          for (int64_t p = 0; p < 2; ++p) {
            const int64_t block = n * (K / 32) + k;
            out[block * 512 + r * 32 + 2 * c + p] = w[(16 * n + c) * K + 32 * k + 2 * r + p];
          }
  return out;
}

std::vector<uint16_t> randomBf16(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> values(count);
  for (uint16_t &value : values)
    value = floatToBf16(normal(rng));
  return values;
}

TEST(WeightLayout, AmxVnniMatchesNaiveReference) {
  constexpr int64_t N = 32, K = 64;
  const std::vector<uint16_t> w = randomBf16(N * K, 1);
  std::vector<uint16_t> out(N * K, 0xFFFF);
  vnniBf16Blocks(w.data(), N, K, out.data());
  const std::vector<uint16_t> expected = naiveVnni(w, N, K);
  for (size_t i = 0; i < out.size(); ++i)
    ASSERT_EQ(out[i], expected[i]) << "element " << i;
  // Spot checks by hand: W[0][0], W[0][1] start block 0; W[16][0] starts
  // block 2 (n = 1, k = 0); W[1][2] is row 1, column 2 of block 0.
  EXPECT_EQ(out[0], w[0]);
  EXPECT_EQ(out[1], w[1]);
  EXPECT_EQ(out[2 * 512], w[16 * K]);
  EXPECT_EQ(out[1 * 32 + 2], w[1 * K + 2]);
  EXPECT_EQ(out[512 + 0], w[32]); // block 1 = (n 0, k 1)
}

// The layout is what tdpbf16ps wants: C[m][j] += sum_r sum_p
// A[m][2r + p] * B[r][2j + p] over each block equals x @ W^T.
TEST(WeightLayout, AmxVnniFeedsTileDotProduct) {
  constexpr int64_t N = 32, K = 64, M = 3;
  const std::vector<uint16_t> w = randomBf16(N * K, 2);
  const std::vector<uint16_t> x = randomBf16(M * K, 3);
  std::vector<uint16_t> blocks(N * K);
  vnniBf16Blocks(w.data(), N, K, blocks.data());
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double tile = 0, direct = 0;
      for (int64_t k = 0; k < K; ++k)
        direct += double{bf16ToFloat(x[m * K + k])} * bf16ToFloat(w[n * K + k]);
      const int64_t bn = n / 16, j = n % 16;
      for (int64_t bk = 0; bk < K / 32; ++bk) {
        const uint16_t *b = blocks.data() + (bn * (K / 32) + bk) * 512;
        for (int64_t r = 0; r < 16; ++r)
          for (int64_t p = 0; p < 2; ++p)
            tile += double{bf16ToFloat(x[m * K + 32 * bk + 2 * r + p])} *
                    bf16ToFloat(b[r * 32 + 2 * j + p]);
      }
      EXPECT_NEAR(tile, direct, 1e-9) << m << "," << n;
    }
}

TEST(WeightLayout, SlicePieces) {
  // [4, 6] of u8 = 10 * row + column.
  std::vector<uint8_t> m(24);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c)
      m[r * 6 + c] = static_cast<uint8_t>(10 * r + c);
  std::vector<uint8_t> out(12);
  slicePiece(m.data(), {4, 6}, 1, 0, 2, 1, out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{20, 21, 22, 23, 24, 25, 30, 31, 32, 33, 34, 35}));
  std::vector<uint8_t> columns(8);
  slicePiece(m.data(), {4, 6}, 1, 1, 3, 2, columns.data());
  EXPECT_EQ(columns, (std::vector<uint8_t>{4, 5, 14, 15, 24, 25, 34, 35}));
  // Rank 3, middle dimension, 2-byte elements.
  std::vector<uint16_t> t(2 * 4 * 3);
  for (size_t i = 0; i < t.size(); ++i)
    t[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> piece(2 * 2 * 3);
  slicePiece(reinterpret_cast<const uint8_t *>(t.data()), {2, 4, 3}, 2, 1, 2, 1,
             reinterpret_cast<uint8_t *>(piece.data()));
  EXPECT_EQ(piece, (std::vector<uint16_t>{6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}));
}

TEST(WeightBinder, TensorNames) {
  WeightSpec single;
  single.name = "model.norm.weight";
  EXPECT_EQ(tensorNames(single), std::vector<std::string>{"model.norm.weight"});
  WeightSpec stack;
  stack.name = "model.layers.1.mlp.experts.{e}.up_proj.weight";
  stack.stack = 3;
  stack.firstExpert = 8;
  EXPECT_EQ(tensorNames(stack),
            (std::vector<std::string>{"model.layers.1.mlp.experts.8.up_proj.weight",
                                      "model.layers.1.mlp.experts.9.up_proj.weight",
                                      "model.layers.1.mlp.experts.10.up_proj.weight"}));
}

class WeightBinderTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/kiln-binder-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::remove_all(dir_, error);
  }

  // A spec for one tiny-model tensor (bf16, no transform).
  static WeightSpec spec(const std::string &name, std::vector<int64_t> shape, uint32_t stack = 0,
                         uint32_t firstExpert = 0) {
    WeightSpec s;
    s.name = name;
    s.shape = std::move(shape);
    s.stack = stack;
    s.firstExpert = firstExpert;
    s.bytes = 2 * std::max<uint32_t>(stack, 1);
    for (int64_t size : s.shape)
      s.bytes *= size;
    return s;
  }

  std::string dir_;
};

TEST_F(WeightBinderTest, SyntheticMatchesSynthesizeTensor) {
  const Config config = tinyConfig();
  auto source = openWeightSource("synthetic:7", tinyConfigJson(), "bf16");
  EXPECT_EQ(source->description(), "synthetic weights (seed 7)");
  const std::vector<WeightSpec> specs = {spec("model.embed_tokens.weight", {1024, 256}),
                                         spec("model.norm.weight", {256})};
  std::vector<AlignedBuffer> bound = bindWeights(specs, *source);
  ASSERT_EQ(bound.size(), 2u);
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::vector<uint8_t> expected = synthesize(config, specs[i].name, 7);
    ASSERT_EQ(bound[i].size(), expected.size());
    EXPECT_EQ(std::memcmp(bound[i].data(), expected.data(), expected.size()), 0) << specs[i].name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(bound[i].data()) % 64, 0u);
  }
}

// An expert stack starting at expert 2, VNNI-transformed and TP-sliced
// (piece 1 of 2 along the input dimension), from a pool of threads.
TEST_F(WeightBinderTest, ExpertStackSliceAndVnni) {
  const Config config = tinyConfig();
  auto source = openWeightSource("synthetic:3", tinyConfigJson(), "bf16");
  WeightSpec s = spec("model.layers.1.mlp.experts.{e}.gate_proj.weight", {128, 128}, 3, 2);
  s.transform = WeightTransform::VnniBf16;
  s.sliceDim = 1;
  s.sliceCount = 2;
  s.sliceIndex = 1;
  s.bytes /= 2;
  ThreadPool pool(3);
  std::vector<AlignedBuffer> bound = bindWeights({s}, *source, &pool);
  ASSERT_EQ(bound[0].size(), 3u * 128 * 64 * 2);
  for (uint32_t e = 0; e < 3; ++e) {
    const std::vector<uint8_t> raw = synthesize(
        config, "model.layers.1.mlp.experts." + std::to_string(2 + e) + ".gate_proj.weight", 3);
    // Columns 64..127 of each row, then the reference layout.
    std::vector<uint16_t> half(128 * 64);
    for (int r = 0; r < 128; ++r)
      std::memcpy(&half[r * 64], raw.data() + (r * 128 + 64) * 2, 64 * 2);
    const std::vector<uint16_t> expected = naiveVnni(half, 128, 64);
    EXPECT_EQ(std::memcmp(bound[0].data() + e * 128 * 64 * 2, expected.data(), expected.size() * 2),
              0)
        << "expert " << 2 + e;
  }
}

TEST_F(WeightBinderTest, CheckpointAndSyntheticAgree) {
  const Config config = tinyConfig();
  muse_spark::writeSyntheticCheckpoint(config, WeightFormat::BF16, 11, dir_, uint64_t{4} << 20);
  auto checkpoint = openWeightSource(dir_, "", "");
  auto synthetic = openWeightSource("synthetic:11", tinyConfigJson(), "bf16");
  WeightSpec experts = spec("model.layers.0.mlp.experts.{e}.down_proj.weight", {128, 128}, 16, 0);
  experts.transform = WeightTransform::VnniBf16;
  WeightSpec q = spec("model.layers.3.self_attn.q_proj.weight", {192, 256});
  q.sliceDim = 0;
  q.sliceCount = 2;
  q.sliceIndex = 0;
  q.bytes /= 2;
  const std::vector<WeightSpec> specs = {spec("lm_head.weight", {1024, 256}), experts, q,
                                         spec("model.layers.2.attn_residual_gate", {256})};
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto fromCheckpoint =
      bindWeights(specs, *checkpoint, nullptr,
                  [&](uint64_t done, uint64_t total) { calls.emplace_back(done, total); });
  auto fromSynthetic = bindWeights(specs, *synthetic);
  for (size_t i = 0; i < specs.size(); ++i) {
    ASSERT_EQ(fromCheckpoint[i].size(), specs[i].bytes);
    EXPECT_EQ(std::memcmp(fromCheckpoint[i].data(), fromSynthetic[i].data(), specs[i].bytes), 0)
        << specs[i].name;
  }
  // Progress: starts at 0, grows, ends at the total of all bindings.
  uint64_t total = 0;
  for (const WeightSpec &s : specs)
    total += s.bytes;
  ASSERT_GE(calls.size(), 2u);
  EXPECT_EQ(calls.front(), std::make_pair(uint64_t{0}, total));
  EXPECT_EQ(calls.back(), std::make_pair(total, total));
  for (size_t i = 1; i < calls.size(); ++i)
    EXPECT_GE(calls[i].first, calls[i - 1].first);
}

TEST_F(WeightBinderTest, CheckpointMismatchesNameTheTensor) {
  std::vector<uint8_t> bytes(64 * 4, 1);
  writeSafetensors(dir_ + "/model.safetensors",
                   {{"a.weight", DType::BF16, {8, 16}, {bytes.data(), 256}},
                    {"b.weight", DType::F32, {64}, {bytes.data(), 256}}});
  auto source = openWeightSource(dir_, "", "");
  std::string message = runtimeErrorOf([&] { bindWeights({spec("a.weight", {16, 8})}, *source); });
  EXPECT_HAS(message, "'a.weight'");
  EXPECT_HAS(message, "expects BF16 [16, 8]");
  EXPECT_HAS(message, "has BF16 [8, 16]");
  message = runtimeErrorOf([&] { bindWeights({spec("b.weight", {64})}, *source); });
  EXPECT_HAS(message, "'b.weight'");
  EXPECT_HAS(message, "has F32 [64]");
  message = runtimeErrorOf([&] { bindWeights({spec("c.weight", {64})}, *source); });
  EXPECT_HAS(message, "'c.weight': not in checkpoint");
  // A correct spec binds.
  auto bound = bindWeights({spec("a.weight", {8, 16})}, *source);
  EXPECT_EQ(bound[0].data()[5], 1);
}

TEST_F(WeightBinderTest, SpecErrors) {
  auto source = openWeightSource("synthetic:1", tinyConfigJson(), "bf16");
  WeightSpec s = spec("model.embed_tokens.weight", {1024, 256});
  s.bytes += 2;
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }), "the artifact says 524290 bytes");
  s = spec("model.embed_tokens.weight", {1024, 256});
  s.sliceCount = 3;
  s.sliceDim = 1;
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }), "does not split into 3 pieces");
  s.sliceDim = 2;
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }),
             "slice_dim 2 is outside its rank 2");
  s = spec("model.norm.weight", {256});
  s.transform = WeightTransform::VnniBf16;
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }), "VnniBf16 needs a BF16 matrix");
  s = spec("model.layers.0.mlp.experts.{e}.up_proj.weight", {128, 128});
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }), "with '{e}'");
  s = spec("model.layers.0.mlp.experts.{e}.up_proj.weight", {128, 128}, 2, 15);
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }),
             "'model.layers.0.mlp.experts.16.up_proj.weight': not in "
             "synthetic weights");
  s = spec("model.layers.0.self_attn.k_proj.weight", {64, 256});
  s.dtype = DType::F32;
  s.bytes *= 2;
  EXPECT_HAS(runtimeErrorOf([&] { checkWeights({s}, *source); }),
             "expects F32 [64, 256], synthetic weights (seed 1) has BF16 "
             "[64, 256]");
}

TEST_F(WeightBinderTest, SourceErrors) {
  EXPECT_HAS(runtimeErrorOf([&] { openWeightSource("synthetic:x1", tinyConfigJson(), "bf16"); }),
             "seed 'x1'");
  EXPECT_HAS(runtimeErrorOf([&] { openWeightSource("synthetic:1", tinyConfigJson(), "fp8"); }),
             "unknown weight format 'fp8'");
  EXPECT_THROW(openWeightSource("synthetic:1", "{", "bf16"), RuntimeError);
  EXPECT_HAS(runtimeErrorOf([&] { openWeightSource(dir_ + "/missing", "", "bf16"); }), "missing");
  // The generator is the one registered for the config's model_type.
  std::string other = tinyConfigJson();
  other.replace(other.find("\"muse_spark\""), 12, "\"other_moe\"");
  EXPECT_HAS(runtimeErrorOf([&] { openWeightSource("synthetic:1", other, "bf16"); }),
             "no generator for model type 'other_moe' is linked into this program (there are: "
             "muse_spark)");
}

// What the runtime reads of the model: three fields of the artifact's
// config, each refused by name.
TEST(ModelFactsTest, ReadsTheConfigsFieldsAndNamesWhatIsWrong) {
  const ModelFacts facts = readModelFacts(tinyConfigJson(), "tiny");
  EXPECT_EQ(facts.modelType, "muse_spark");
  EXPECT_EQ(facts.vocabSize, 1024);
  EXPECT_EQ(defaultContextLength(facts), std::min<int64_t>(4096, facts.maxPositions));
  EXPECT_HAS(runtimeErrorOf([] { readModelFacts(R"({"vocab_size": 8})", "c.json"); }),
             "c.json: field 'model_type': expected a model family name, got nothing");
  EXPECT_HAS(runtimeErrorOf([] {
               readModelFacts(
                   R"({"model_type": "m", "vocab_size": 0, "max_position_embeddings": 8})",
                   "c.json");
             }),
             "c.json: field 'vocab_size': expected an integer in 1..16777216, got 0");
  EXPECT_HAS(
      runtimeErrorOf([] { readModelFacts(R"({"model_type": "m", "vocab_size": 8})", "c.json"); }),
      "field 'max_position_embeddings': expected an integer in 1..16777216, got nothing");
  EXPECT_HAS(runtimeErrorOf([] { readModelFacts("[1]", "c.json"); }),
             "expected a JSON object, got an array");
  // JSON nested deeper than any config is refused as it is parsed (printing
  // it back would recurse 100,000 deep); a long field is cut, not echoed whole.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_HAS(runtimeErrorOf([&] { readModelFacts(R"({"model_type": )" + deep + "}", "c.json"); }),
             "c.json: JSON nesting deeper than 32 levels");
  EXPECT_HAS(
      runtimeErrorOf([] { readModelFacts(R"({"model_type": "m", "model_type": "n"})", "c.json"); }),
      "c.json: duplicate key 'model_type' in the top-level object");
  const std::string longName = std::string(1000, 'x');
  const std::string message = runtimeErrorOf([&] {
    readModelFacts(R"({"model_type": "m", "vocab_size": ")" + longName + R"("})", "c.json");
  });
  EXPECT_HAS(message, "field 'vocab_size': expected an integer in 1..16777216, got \"xxx");
  EXPECT_LT(message.size(), 200u);
  EXPECT_HAS(runtimeErrorOf([] { readModelFacts("{", "c.json"); }),
             "c.json: not valid JSON at byte 2");
}

TEST_F(WeightBinderTest, Nvfp4Synthetic) {
  auto source = openWeightSource("synthetic:5", tinyConfigJson(), "nvfp4");
  auto type = source->find("model.layers.1.mlp.experts.0.up_proj.weight");
  ASSERT_TRUE(type.has_value());
  EXPECT_EQ(type->dtype, DType::U8);
  EXPECT_EQ(type->shape, (std::vector<int64_t>{128, 64}));
  WeightSpec s;
  s.name = "model.layers.1.mlp.experts.{e}.up_proj.weight_scale";
  s.stack = 2;
  s.dtype = DType::F8_E4M3;
  s.shape = {128, 8};
  s.bytes = 2 * 128 * 8;
  auto bound = bindWeights({s}, *source);
  EXPECT_EQ(bound[0].size(), s.bytes);
}

} // namespace
} // namespace kiln
