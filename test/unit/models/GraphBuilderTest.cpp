// The graph builder against the checkpoint manifest: every tensor the graph
// reads is one the checkpoint has, with the same shape and dtype, and the
// parameter budget read off the graph equals the manifest's.
#include "models/muse_spark/GraphBuilder.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/kiln/KilnOps.h"
#include "models/muse_spark/Report.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace kiln::muse_spark {
namespace {

class GraphBuilderTest : public ::testing::TestWithParam<std::tuple<const char *, WeightFormat>> {
protected:
  GraphBuilderTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }
  mlir::MLIRContext context;
};

TEST_P(GraphBuilderTest, GraphMatchesTheCheckpointManifest) {
  auto [name, format] = GetParam();
  Config config = loadConfig(name);
  GraphOptions options;
  options.tokens = 5;
  options.format = format;
  int64_t layersReported = 0;
  options.progress = [&](int64_t done, int64_t total) {
    EXPECT_EQ(done, layersReported + 1);
    EXPECT_EQ(total, config.numHiddenLayers);
    layersReported = done;
  };
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardGraph(context, config, options);
  ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));
  EXPECT_EQ(layersReported, config.numHiddenLayers);

  mlir::FailureOr<ParameterBudget> budget = countParameters(*module, config, format);
  ASSERT_TRUE(mlir::succeeded(budget));
  std::vector<TensorSpec> manifest = checkpointManifest(config, format);
  std::array<int64_t, kNumWeightParts> expected{};
  int64_t inputScales = 0;
  for (const TensorSpec &spec : manifest) {
    expected[static_cast<size_t>(spec.part)] += spec.parameters;
    inputScales +=
        spec.name.size() > 12 && spec.name.compare(spec.name.size() - 12, 12, ".input_scale") == 0;
  }
  EXPECT_EQ(budget->byPart, expected);
  // W4A16 never reads the activation scales; everything else is read.
  EXPECT_EQ(budget->manifestTensors, static_cast<int64_t>(manifest.size()));
  EXPECT_EQ(budget->referencedTensors, budget->manifestTensors - inputScales);
}

INSTANTIATE_TEST_SUITE_P(Configs, GraphBuilderTest,
                         ::testing::Combine(::testing::Values("muse-spark-tiny", "muse-spark-small",
                                                              "muse-spark-open-816b-a42b"),
                                            ::testing::Values(WeightFormat::BF16,
                                                              WeightFormat::NVFP4)),
                         [](const auto &info) {
                           std::string name = std::get<0>(info.param);
                           for (char &c : name)
                             c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return name + (std::get<1>(info.param) == WeightFormat::NVFP4 ? "_nvfp4"
                                                                                         : "_bf16");
                         });

TEST(GraphBuilder, FullModelFitsInTwoGigabytes) {
  struct rusage before {
  }, after{};
  getrusage(RUSAGE_SELF, &before);
  {
    mlir::MLIRContext context;
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    GraphOptions options;
    options.tokens = 8192;
    options.format = WeightFormat::NVFP4;
    mlir::OwningOpRef<mlir::ModuleOp> module =
        buildForwardGraph(context, loadConfig("muse-spark-open-816b-a42b"), options);
    ASSERT_TRUE(mlir::succeeded(mlir::verify(*module)));
  }
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 2L * 1024 * 1024) << "KiB";
}

TEST(GraphBuilder, AWeightOutsideTheManifestIsAnError) {
  mlir::MLIRContext context;
  context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
  Config config = loadConfig("muse-spark-tiny");
  mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardGraph(context, config, GraphOptions());
  WeightOp first;
  module->walk([&](WeightOp op) {
    if (!first)
      first = op;
  });
  ASSERT_TRUE(first);
  first.setName("model.embed_tokens.weights");
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    message = diag.str();
    return mlir::success();
  });
  EXPECT_TRUE(mlir::failed(countParameters(*module, config, WeightFormat::BF16)));
  EXPECT_NE(message.find("'model.embed_tokens.weights' is not a tensor of a BF16 checkpoint"),
            std::string::npos)
      << message;
}

} // namespace
} // namespace kiln::muse_spark
