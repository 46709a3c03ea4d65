// The interpreter on whole muse-spark-tiny checkpoints (seeded, BF16 and
// NVFP4): properties of the model card that must hold of the interpreter's
// logits, each of which a mistake in the builder or the op semantics breaks.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnDialect.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/GraphBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <numeric>

namespace kiln::interp {
namespace {

using muse_spark::Config;
using muse_spark::WeightFormat;

constexpr uint64_t kSeed = 11;

// A checkpoint's weights with some tensors changed on the way in.
class EditedWeights : public WeightSource {
public:
  EditedWeights(WeightSource &base, std::function<void(const std::string &, HostTensor &)> edit)
      : base(base), edit(std::move(edit)) {}
  HostTensor load(const std::string &name) override {
    HostTensor t = base.load(name);
    edit(name, t);
    return t;
  }

private:
  WeightSource &base;
  std::function<void(const std::string &, HostTensor &)> edit;
};

bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class TinyModelTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new std::string(std::filesystem::temp_directory_path() /
                          ("kiln-model-test-" + std::to_string(::getpid())));
    config = new Config(muse_spark::loadConfig("muse-spark-tiny"));
    muse_spark::writeSyntheticCheckpoint(*config, WeightFormat::BF16, kSeed, *dir + "/bf16",
                                         1 << 20);
    muse_spark::writeSyntheticCheckpoint(*config, WeightFormat::NVFP4, kSeed, *dir + "/nvfp4",
                                         1 << 20);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir);
    delete dir;
    delete config;
  }

  TinyModelTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }

  mlir::func::FuncOp forward(WeightFormat format) {
    muse_spark::GraphOptions options;
    options.tokens = mlir::ShapedType::kDynamic;
    options.format = format;
    // Exact keys and values: these are properties of the model, which a
    // bf16 cache's rounding would blur.
    options.kvType = muse_spark::KvDType::F32;
    modules.push_back(muse_spark::buildForwardGraph(context, *config, options));
    return modules.back()->lookupSymbol<mlir::func::FuncOp>("forward");
  }

  // Logits [T, V] of a prefill of `ids` at positions 0..T-1.
  HostTensor prefill(WeightSource &weights, const std::vector<int32_t> &ids,
                     WeightFormat format = WeightFormat::BF16) {
    int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    Interpreter interpreter(weights);
    return interpreter
        .run(forward(format), {HostTensor::ints({n}, ids), HostTensor::ints({n}, positions)})
        .at(0);
  }

  static std::vector<int32_t> prompt() { return {5, 900, 17, 17, 256, 3, 1023, 42, 77, 600, 8, 1}; }

  static std::string *dir;
  static Config *config;
  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
};

std::string *TinyModelTest::dir = nullptr;
Config *TinyModelTest::config = nullptr;

double relativeRms(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0, ref = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    diff += (a[k] - b[k]) * double(a[k] - b[k]);
    ref += double(b[k]) * b[k];
  }
  return std::sqrt(diff / ref);
}

TEST_F(TinyModelTest, LogitsAreFiniteAndDeterministic) {
  CheckpointWeights weights(*dir + "/bf16");
  HostTensor a = prefill(weights, prompt());
  HostTensor b = prefill(weights, prompt());
  ASSERT_EQ(a.shape, (std::vector<int64_t>{12, 1024}));
  EXPECT_EQ(a.f, b.f);
  for (float v : a.f)
    ASSERT_TRUE(std::isfinite(v));
  // Not degenerate: the logits of a token spread over several units.
  double mean = std::accumulate(a.f.begin(), a.f.begin() + 1024, 0.0) / 1024, var = 0;
  for (int k = 0; k < 1024; ++k)
    var += (a.f[k] - mean) * (a.f[k] - mean) / 1024;
  EXPECT_GT(std::sqrt(var), 0.1);
}

TEST_F(TinyModelTest, ChangingTokenTNeverChangesLogitsBeforeT) {
  CheckpointWeights weights(*dir + "/bf16");
  std::vector<int32_t> ids = prompt();
  HostTensor base = prefill(weights, ids);
  ids[9] = 333;
  HostTensor changed = prefill(weights, ids);
  int64_t vocab = 1024;
  for (int64_t t = 0; t < 9; ++t)
    EXPECT_TRUE(std::equal(base.f.begin() + t * vocab, base.f.begin() + (t + 1) * vocab,
                           changed.f.begin() + t * vocab))
        << "position " << t;
  for (int64_t t = 9; t < 12; ++t)
    EXPECT_FALSE(std::equal(base.f.begin() + t * vocab, base.f.begin() + (t + 1) * vocab,
                            changed.f.begin() + t * vocab))
        << "position " << t;
}

// Sandwich norms: o_proj and the unpooler feed a post-norm, so scaling them
// cannot change the logits. Without the post-norms it would.
TEST_F(TinyModelTest, PostNormsMakeLogitsBlindToProjectionScale) {
  CheckpointWeights base(*dir + "/bf16");
  EditedWeights scaled(base, [](const std::string &name, HostTensor &t) {
    if (endsWith(name, "o_proj.weight") || endsWith(name, "mlp.unpooler.weight"))
      for (float &v : t.f)
        v *= 8;
  });
  HostTensor a = prefill(base, prompt());
  HostTensor b = prefill(scaled, prompt());
  EXPECT_LT(relativeRms(b.f, a.f), 1e-4);
}

// Gated residuals: with every gate at zero the residual stream is the
// embedding, so the logits are lm_head(norm(embed(ids))), computed here
// directly. With the synthetic gates they are far from that.
TEST_F(TinyModelTest, ResidualGatesScaleEachLayersUpdate) {
  CheckpointWeights base(*dir + "/bf16");
  EditedWeights zeroGates(base, [](const std::string &name, HostTensor &t) {
    if (endsWith(name, "attn_residual_gate") || endsWith(name, "mlp_residual_gate"))
      std::fill(t.f.begin(), t.f.end(), 0.0f);
  });
  std::vector<int32_t> ids = prompt();
  HostTensor embedOnly =
      linear(rmsNorm(embed(base.load("model.embed_tokens.weight"), HostTensor::ints({12}, ids)),
                     base.load("model.norm.weight"), config->rmsNormEps),
             base.load("lm_head.weight"));
  HostTensor gated = prefill(zeroGates, ids);
  EXPECT_LT(relativeRms(gated.f, embedOnly.f), 1e-5);
  HostTensor full = prefill(base, ids);
  EXPECT_GT(relativeRms(full.f, embedOnly.f), 0.1);
}

TEST_F(TinyModelTest, Nvfp4CheckpointStaysCloseToBf16) {
  CheckpointWeights bf16(*dir + "/bf16"), nvfp4(*dir + "/nvfp4");
  HostTensor a = prefill(bf16, prompt(), WeightFormat::BF16);
  HostTensor b = prefill(nvfp4, prompt(), WeightFormat::NVFP4);
  double rel = relativeRms(b.f, a.f);
  EXPECT_GT(rel, 0.0); // the experts really are quantised
  EXPECT_LT(rel, 0.15);
}

TEST_F(TinyModelTest, GreedyGenerationFollowsTheArgmax) {
  CheckpointWeights weights(*dir + "/bf16");
  Interpreter interpreter(weights);
  std::vector<int32_t> ids = prompt();
  std::vector<int32_t> generated = generateGreedy(interpreter, forward(WeightFormat::BF16), ids, 3);
  ASSERT_EQ(generated.size(), 3u);
  for (int32_t next : generated) {
    HostTensor logits = prefill(weights, ids);
    EXPECT_EQ(next, argmax(&logits.f[logits.f.size() - 1024], 1024));
    ids.push_back(next);
  }
}

} // namespace
} // namespace kiln::interp
