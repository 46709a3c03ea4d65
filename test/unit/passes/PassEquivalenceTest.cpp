// Every pass is proven by the interpreter: the IR after a pipeline, run on
// simulated ranks, gives the logits of the unsharded, unfused IR on one rank.
// Seeded muse-spark-tiny checkpoints in BF16 and NVFP4, and a tiny variant
// with 8 query heads so that TP=4 divides them.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "compiler/pipeline/PassEffects.h"
#include "compiler/pipeline/Pipeline.h"
#include "dialects/kiln/KilnDialect.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/GraphBuilder.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numeric>

namespace kiln {
namespace {

using interp::HostTensor;
using muse_spark::Config;
using muse_spark::WeightFormat;

constexpr int64_t kTokens = 12; // divisible by every SP degree, longer than the window (8)

struct Case {
  const char *config; // "tiny" or "tiny-heads8"
  WeightFormat format;
  const char *pipeline;
  int64_t ranks;
};

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  std::string name = std::string(info.param.config) + "_" +
                     (info.param.format == WeightFormat::NVFP4 ? "nvfp4" : "bf16") + "_" +
                     info.param.pipeline + "_r" + std::to_string(info.param.ranks);
  for (char &c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)))
      c = '_';
  return name;
}

class PassEquivalence : public ::testing::TestWithParam<Case> {
protected:
  static void SetUpTestSuite() {
    root = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("kiln-pass-equivalence-" + std::to_string(::getpid())));
    configs = new std::map<std::string, Config>;
    (*configs)["tiny"] = muse_spark::loadConfig("muse-spark-tiny");
    Config heads8 = (*configs)["tiny"];
    heads8.name = "tiny-heads8";
    heads8.numAttentionHeads = 8;
    (*configs)["tiny-heads8"] = heads8;
    for (const auto &[name, config] : *configs)
      for (WeightFormat format : {WeightFormat::BF16, WeightFormat::NVFP4})
        muse_spark::writeSyntheticCheckpoint(config, format, 21, checkpointDir(name, format),
                                             1 << 24);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*root);
    delete root;
    delete configs;
  }
  static std::string checkpointDir(const std::string &config, WeightFormat format) {
    return (*root / (config + (format == WeightFormat::NVFP4 ? "-nvfp4" : "-bf16"))).string();
  }

  PassEquivalence() {
    context.loadDialect<KilnDialect, mlir::func::FuncDialect, mlir::shard::ShardDialect>();
    registerGraphPipeline();
  }

  mlir::OwningOpRef<mlir::ModuleOp> build(const Case &c) {
    muse_spark::GraphOptions options;
    options.tokens = kTokens;
    options.format = c.format;
    // Exact keys and values: a pass that reorders an f32 sum may move a key
    // across a bf16 rounding boundary, which would hide what the comparison
    // is for.
    options.kvType = muse_spark::KvDType::F32;
    return muse_spark::buildForwardGraph(context, configs->at(c.config), options);
  }

  std::vector<std::vector<HostTensor>> run(mlir::ModuleOp module, interp::WeightSource &weights,
                                           int64_t ranks) {
    std::vector<int32_t> ids(kTokens), positions(kTokens);
    std::iota(positions.begin(), positions.end(), 0);
    for (int64_t t = 0; t < kTokens; ++t)
      ids[t] = static_cast<int32_t>((t * 389 + 17) % 1024);
    std::vector<HostTensor> inputs = {HostTensor::ints({kTokens}, ids),
                                      HostTensor::ints({kTokens}, positions)};
    interp::Interpreter interpreter(weights);
    return interpreter.runRanks(module.lookupSymbol<mlir::func::FuncOp>("forward"),
                                std::vector<std::vector<HostTensor>>(ranks, inputs));
  }

  static std::filesystem::path *root;
  static std::map<std::string, Config> *configs;
  mlir::MLIRContext context;
};

std::filesystem::path *PassEquivalence::root = nullptr;
std::map<std::string, Config> *PassEquivalence::configs = nullptr;

TEST_P(PassEquivalence, SameLogitsAsTheSingleRankGraph) {
  const Case &c = GetParam();
  interp::CheckpointWeights weights(checkpointDir(c.config, c.format));
  mlir::OwningOpRef<mlir::ModuleOp> reference = build(c);
  HostTensor expected = run(*reference, weights, 1).at(0).at(0);

  mlir::OwningOpRef<mlir::ModuleOp> module = build(c);
  mlir::PassManager pm(&context);
  ASSERT_TRUE(mlir::succeeded(mlir::parsePassPipeline(c.pipeline, pm)));
  std::vector<PassEffect> effects;
  pm.addInstrumentation(std::make_unique<PassEffectsRecorder>(effects));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));
  // Each pass did something here (a pass that silently stopped matching
  // would still give the same logits); kiln-verify-weights only checks.
  ASSERT_FALSE(effects.empty());
  for (const PassEffect &effect : effects)
    EXPECT_EQ(effect.opDelta.empty(), effect.pass == "kiln-verify-weights") << describe(effect);

  std::vector<std::vector<HostTensor>> results = run(*module, weights, c.ranks);
  double scale = 0;
  for (float v : expected.f)
    scale = std::max(scale, double(std::abs(v)));
  for (int64_t r = 0; r < c.ranks; ++r) {
    const HostTensor &got = results[r].at(0);
    ASSERT_EQ(got.shape, expected.shape) << "rank " << r;
    double worst = 0;
    for (size_t k = 0; k < got.f.size(); ++k)
      worst = std::max(worst, double(std::abs(got.f[k] - expected.f[k])));
    EXPECT_LT(worst, 1e-5 * scale) << "rank " << r << " max |diff| " << worst;
  }
}

// What the check above sees of a pass that matched nothing: a second
// kiln-fuse-norm-residual finds no chain left to fuse.
TEST_F(PassEquivalence, APassThatChangedNothingIsSeen) {
  mlir::OwningOpRef<mlir::ModuleOp> module = build({"tiny", WeightFormat::BF16, "", 1});
  mlir::PassManager pm(&context);
  ASSERT_TRUE(mlir::succeeded(
      mlir::parsePassPipeline("kiln-fuse-norm-residual,kiln-fuse-norm-residual", pm)));
  std::vector<PassEffect> effects;
  pm.addInstrumentation(std::make_unique<PassEffectsRecorder>(effects));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  ASSERT_EQ(effects.size(), 2u);
  EXPECT_FALSE(effects[0].opDelta.empty());
  EXPECT_TRUE(effects[1].opDelta.empty()) << describe(effects[1]);
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (WeightFormat format : {WeightFormat::BF16, WeightFormat::NVFP4}) {
    all.push_back({"tiny", format, "kiln-shard{tp=2}", 2});
    all.push_back({"tiny", format, "kiln-shard{ep=2}", 2});
    all.push_back({"tiny", format, "kiln-shard{ep=4}", 4});
    all.push_back({"tiny", format, "kiln-shard{tp=2 ep=2}", 2});
    all.push_back({"tiny", format, "kiln-shard{tp=2 ep=4}", 4});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4}", 4});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=2}", 4});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=4}", 4});
    all.push_back({"tiny", format, "kiln-fuse-norm-residual", 1});
    all.push_back({"tiny", format, "kiln-shard{tp=2 ep=2},kiln-fuse-norm-residual", 2});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=4},kiln-fuse-norm-residual", 4});
    all.push_back({"tiny", format, "kiln-fuse-head-norm-rope", 1});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=4},kiln-fuse-head-norm-rope", 4});
    all.push_back({"tiny", format,
                   "kiln-shard{tp=2},kiln-fuse-head-norm-rope,kiln-insert-sp-collectives", 2});
    all.push_back({"tiny", format, "kiln-shard{tp=2},kiln-shard-pooler", 2});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=2},kiln-shard-pooler", 4});
    all.push_back({"tiny", format, "kiln-form-megamoe", 1});
    all.push_back({"tiny", format, "kiln-shard{ep=4},kiln-form-megamoe", 4});
    all.push_back({"tiny", format, "kiln-shard{tp=2 ep=2},kiln-shard-pooler,kiln-form-megamoe", 2});
    all.push_back({"tiny-heads8", format, "kiln-shard{tp=4 ep=4},kiln-form-megamoe", 4});
    // The whole pipeline kilnc runs (compiler/pipeline/Pipeline.h), registered.
    all.push_back({"tiny", format, "kiln-graph-pipeline{tp=2 ep=4 sp=true}", 4});
    all.push_back({"tiny-heads8", format, "kiln-graph-pipeline{tp=4 ep=4 sp=true}", 4});
    all.push_back({"tiny", format, "kiln-graph-pipeline{tp=2 ep=2}", 2});
    all.push_back({"tiny", format, "kiln-graph-pipeline", 1});
    all.push_back({"tiny", format, "kiln-shard{tp=2},kiln-insert-sp-collectives", 2});
    all.push_back(
        {"tiny", format, "kiln-shard{tp=2 ep=2},kiln-form-megamoe,kiln-insert-sp-collectives", 2});
    all.push_back(
        {"tiny", format, "kiln-shard{tp=2 ep=4},kiln-form-megamoe,kiln-insert-sp-collectives", 4});
    all.push_back({"tiny-heads8", format,
                   "kiln-shard{tp=4 ep=2},kiln-form-megamoe,kiln-insert-sp-collectives", 4});
    all.push_back({"tiny-heads8", format,
                   "kiln-shard{tp=4 ep=4},kiln-form-megamoe,kiln-insert-sp-collectives", 4});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Pipelines, PassEquivalence, ::testing::ValuesIn(cases()), caseName);

} // namespace
} // namespace kiln
