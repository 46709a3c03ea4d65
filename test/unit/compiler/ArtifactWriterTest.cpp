// The artifact writer on a hand-written plan: a kernel's dynamic shared memory
// becomes Kernel.shared_bytes, and each "tmap:B:X,Y:S" scalar a TensorMap
// entry of its launch plus a TensorMap scalar indexing it (schema 1.5); the
// artifact it writes passes the runtime's checks.
#include "compiler/artifact/ArtifactWriter.h"
#include "dialects/plan/PlanDialect.h"
#include "runtime/artifact/Artifact.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

namespace fb = kiln::artifact;

// A GEMM reading x and the weight through tensor maps, then one launch
// without any.
constexpr const char *kPlan = R"mlir(
plan.entry @decode attributes {max_tokens = 1 : i64, arena_bytes = 12288 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<128, 0, 1>] bf16 {offset = 0 : i64}
  %w = plan.binding "weight" 0 [#plan.dim<64, 0, 1>, #plan.dim<128, 0, 1>] bf16
  %y = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] f32 {offset = 4096 : i64}
  plan.launch @gemm(%x, %w, %y) scalars ["tokens:0", "tmap:0:64,16:128", "tmap:1:32,64:64", "past:0"] {max_parts = 1 : i64, op = "model.layers.0.mlp.up_proj", grid = #plan.dim<1, 0, 1>, block = 384 : i64}
  plan.launch @plain(%y) scalars ["tokens:0"] {max_parts = 1 : i64, op = "model.norm", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}
)mlir";

class ArtifactWriterTest : public ::testing::Test {
protected:
  ArtifactWriterTest() { context_.loadDialect<plan::PlanDialect>(); }

  kernels::LoweredModel model() {
    kernels::LoweredModel lowered;
    lowered.plan = mlir::parseSourceString<mlir::ModuleOp>(kPlan, &context_);
    EXPECT_TRUE(lowered.plan);
    kernels::KernelSpec gemm{"gemm", "kiln.linear", "{\"kind\": \"wgmma\"}", ""};
    gemm.sharedBytes = 196608;
    lowered.kernels = {gemm, {"plain", "kiln.rms_norm", "{}", ""}};
    kernels::WeightInfo weight;
    weight.name = "model.layers.0.mlp.up_proj.weight";
    weight.shape = {64, 128};
    weight.bytes = 64 * 128 * 2;
    lowered.weights = {weight};
    return lowered;
  }

  static ArtifactInfo nvptx() {
    ArtifactInfo info;
    info.targetKind = ArtifactInfo::Nvptx;
    info.libraryFormat = "ptx";
    info.triple = "nvptx64-nvidia-cuda";
    info.chip = "sm_90a";
    info.modelName = "muse-spark-test";
    info.configJson = R"({"model_type":"muse_spark","vocab_size":64,"max_position_embeddings":64})";
    info.weightFormat = "bf16";
    return info;
  }

  mlir::MLIRContext context_;
};

TEST_F(ArtifactWriterTest, WritesSharedBytesAndTensorMaps) {
  const std::string ptx = "// PTX\n";
  const std::vector<uint8_t> library(ptx.c_str(), ptx.c_str() + ptx.size() + 1);
  mlir::FailureOr<std::vector<uint8_t>> bytes = serializeArtifact(model(), library, nvptx());
  ASSERT_TRUE(mlir::succeeded(bytes));
  const Artifact artifact = Artifact::fromBytes(*bytes, "written.kiln");
  EXPECT_EQ(artifact->version()->schema_minor(), 10u);
  EXPECT_EQ(artifact->target()->memory_bytes(), 0u); // no memory plan asked for
  EXPECT_EQ(artifact->kernels()->Get(0)->shared_bytes(), 196608u);
  EXPECT_EQ(artifact->kernels()->Get(1)->shared_bytes(), 0u);

  const auto *steps = artifact.entryPoint("decode").steps();
  const fb::Launch &gemm = *steps->Get(0)->step_as_Launch();
  const auto &scalars = *gemm.scalars();
  ASSERT_EQ(scalars.size(), 4u);
  EXPECT_EQ(scalars.Get(0)->kind(), fb::ScalarKind::Tokens);
  EXPECT_EQ(scalars.Get(1)->kind(), fb::ScalarKind::TensorMap);
  EXPECT_EQ(scalars.Get(1)->value(), 0);
  EXPECT_EQ(scalars.Get(2)->kind(), fb::ScalarKind::TensorMap);
  EXPECT_EQ(scalars.Get(2)->value(), 1);
  EXPECT_EQ(scalars.Get(3)->kind(), fb::ScalarKind::PastTokens);
  ASSERT_NE(gemm.tensor_maps(), nullptr);
  ASSERT_EQ(gemm.tensor_maps()->size(), 2u);
  const fb::TensorMap &x = *gemm.tensor_maps()->Get(0);
  EXPECT_EQ(x.buffer(), 0u);
  EXPECT_EQ(std::vector<uint32_t>(x.box()->begin(), x.box()->end()),
            (std::vector<uint32_t>{64, 16}));
  EXPECT_EQ(x.swizzle(), 128);
  const fb::TensorMap &w = *gemm.tensor_maps()->Get(1);
  EXPECT_EQ(w.buffer(), 1u);
  EXPECT_EQ(std::vector<uint32_t>(w.box()->begin(), w.box()->end()),
            (std::vector<uint32_t>{32, 64}));
  EXPECT_EQ(w.swizzle(), 64);

  // A launch without maps has none.
  EXPECT_EQ(steps->Get(1)->step_as_Launch()->tensor_maps(), nullptr);
}

TEST_F(ArtifactWriterTest, RefusesSharedBytesAnArtifactCannotSay) {
  kernels::LoweredModel lowered = model();
  lowered.kernels[0].sharedBytes = int64_t{1} << 33;
  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &diagnostic) {
    message = diagnostic.str();
    return mlir::success();
  });
  EXPECT_TRUE(mlir::failed(serializeArtifact(lowered, {0}, nvptx())));
  EXPECT_EQ(message, "kernel 'gemm' needs 8589934592 bytes of dynamic shared memory, which an "
                     "artifact cannot say");
}

} // namespace
} // namespace kiln
