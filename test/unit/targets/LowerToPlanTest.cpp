// The shared lowering on a hand-written graph: each op's kernel comes from the
// target's hooks (the generic kernels on x86, GpuTargetHooks' block and warp
// kernels on nvptx and amdgcn), and an op no lowering takes is named with the
// target in the error.
#include "compiler/artifact/CompileTarget.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/plan/PlanOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kiln {
namespace {

// Embedding, final norm and head of a 256-wide model; `extra` goes before
// the return.
std::string graph(const std::string &extra = "") {
  return R"mlir(
func.func @forward(%ids: tensor<?xi32>, %pos: tensor<?xi32>) -> tensor<1x1024xf32> {
  %t = kiln.weight "model.embed_tokens.weight" : tensor<1024x256xbf16>
  %x = kiln.embed %t, %ids : tensor<1024x256xbf16>, tensor<?xi32> -> tensor<?x256xbf16>
  %w = kiln.weight "model.norm.weight" : tensor<256xbf16>
  %n = kiln.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<?x256xbf16>, tensor<256xbf16>
  %h = kiln.weight "lm_head.weight" : tensor<1024x256xbf16>
  %l = kiln.logits %n, %h {last_only} : tensor<?x256xbf16>, tensor<1024x256xbf16> -> tensor<1x1024xf32>
)mlir" + extra +
         R"mlir(
  return %l : tensor<1x1024xf32>
}
)mlir";
}

class LowerToPlanTest : public ::testing::Test {
protected:
  LowerToPlanTest() {
    context_.loadDialect<KilnDialect, mlir::func::FuncDialect, mlir::shard::ShardDialect>();
    context_.allowUnregisteredDialects();
  }

  // The kernel names of the decode entry, in launch order; `error` gets the
  // diagnostics.
  std::vector<std::string> decodeKernels(const TargetChoice &target, const std::string &source,
                                         std::string &error) {
    mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &d) {
      error += d.str() + "\n";
      return mlir::success();
    });
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(source, &context_);
    if (!module)
      return {"<parse error>"};
    mlir::FailureOr<kernels::LoweredModel> lowered =
        kernels::lowerToPlan(*module, kernels::LowerOptions{}, *hooksFor(target));
    if (mlir::failed(lowered))
      return {};
    std::vector<std::string> names;
    lowered->plan->walk([&](mlir::Operation *op) {
      auto entry = op->getParentOfType<plan::EntryOp>();
      if (op->getName().getStringRef() != "plan.launch" || entry.getSymName() != "decode")
        return;
      names.push_back(op->getAttrOfType<mlir::FlatSymbolRefAttr>("kernel").getValue().str());
    });
    return names;
  }

  static TargetChoice cpu(const char *name) {
    std::string error;
    std::optional<x86::CpuTarget> resolved = x86::resolveCpu(name, error);
    EXPECT_TRUE(resolved) << error;
    return TargetChoice::x86(resolved.value_or(x86::CpuTarget{}));
  }

  static TargetChoice gpu(const char *target) {
    const Chip *chip = chipForTarget(target);
    EXPECT_TRUE(chip) << target;
    return TargetChoice::forChip(*chip);
  }

  mlir::MLIRContext context_;
};

TEST_F(LowerToPlanTest, TheHooksChooseEachOpsKernel) {
  std::string error;
  std::vector<std::string> x86 = decodeKernels(cpu("x86-64-v3"), graph(), error);
  std::vector<std::string> nvptx = decodeKernels(gpu("sm_90"), graph(), error);
  std::vector<std::string> amdgcn = decodeKernels(gpu("gfx950"), graph(), error);
  ASSERT_EQ(error, "");
  ASSERT_FALSE(x86.empty());
  // Both GPU targets take the same shared choices; x86 the generic kernels.
  EXPECT_EQ(nvptx, amdgcn);
  EXPECT_NE(x86, nvptx);
  auto has = [](const std::vector<std::string> &names, const std::string &part) {
    for (const std::string &name : names)
      if (name.find(part) != std::string::npos)
        return true;
    return false;
  };
  // A GPU RMSNorm is a block per row, its embedding a thread per 4 elements.
  EXPECT_TRUE(has(nvptx, "rms_norm_block_256"));
  EXPECT_TRUE(has(nvptx, "embed_threads_1024x256"));
  EXPECT_FALSE(has(x86, "_block_"));
  EXPECT_FALSE(has(x86, "_threads_"));
  EXPECT_FALSE(has(x86, "_warp"));
}

TEST_F(LowerToPlanTest, AnOpNoLoweringTakesNamesItselfAndTheTarget) {
  std::string extra =
      R"mlir(  %z = "kiln_test.fused_thing"(%n) : (tensor<?x256xbf16>) -> tensor<?x256xbf16>)mlir";
  for (const TargetChoice &target : {cpu("x86-64-v3"), gpu("sm_90"), gpu("gfx950")}) {
    std::string error;
    EXPECT_TRUE(decodeKernels(target, graph(extra), error).empty());
    EXPECT_NE(
        error.find("'kiln_test.fused_thing' op is not lowered to the " + target.name() + " plan"),
        std::string::npos)
        << error;
  }
}

TEST_F(LowerToPlanTest, AKernelMustFitTheChipsSharedMemory) {
  // Hopper's wgmma GEMM stages its tiles in about 200 KiB of shared memory:
  // a prefill of 256 tokens gets it on sm_90, and a chip row with less
  // shared memory refuses it by name.
  std::string extra =
      R"mlir(  %wq = kiln.weight "model.layers.0.self_attn.q_proj.weight" : tensor<256x256xbf16>
  %q = kiln.linear %n, %wq : tensor<?x256xbf16>, tensor<256x256xbf16> -> tensor<?x256xbf16>)mlir";
  kernels::LowerOptions options;
  options.maxPrefillTokens = 256;
  std::string error;
  mlir::ScopedDiagnosticHandler handler(&context_, [&](mlir::Diagnostic &d) {
    error += d.str() + "\n";
    return mlir::success();
  });
  auto lower = [&](const Chip &chip) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(graph(extra), &context_);
    EXPECT_TRUE(module);
    return mlir::succeeded(lowerAndPlan(*module, options, TargetChoice::forChip(chip)));
  };
  Chip hopper = *chipForTarget("sm_90");
  EXPECT_TRUE(lower(hopper)) << error;
  EXPECT_EQ(error, "");
  hopper.sharedKiB = 99;
  EXPECT_FALSE(lower(hopper));
  EXPECT_NE(error.find("kernel linear_wgmma_256x256 needs"), std::string::npos) << error;
  EXPECT_NE(error.find("a block on sm_90 (sm_90a) has at most 101376"), std::string::npos) << error;
}

TEST(ChipTableTest, EveryRowIsWhole) {
  for (const Chip &chip : allChips()) {
    SCOPED_TRACE(std::string(chip.target));
    EXPECT_EQ(chipForTarget(chip.target), &chip);
    EXPECT_EQ(findChip(chip.chip), &chip);
    EXPECT_TRUE(chip.warp == 32 || chip.warp == 64);
    EXPECT_GT(chip.units, 0);
    EXPECT_GT(chip.sharedKiB, 0);
    EXPECT_GE(chip.registers, chip.vgprs);
    EXPECT_GT(chip.memoryGiB, 0);
    EXPECT_FALSE(chip.products.empty());
    if (chip.kind == ChipKind::Nvptx) {
      EXPECT_EQ(chip.warp, 32);
      EXPECT_EQ(chip.elfMach, 0u);
      EXPECT_EQ(chip.features.substr(0, 4), "+ptx");
    } else {
      EXPECT_NE(chip.elfMach, 0u);
      EXPECT_GT(chip.sgprs, 0);
    }
  }
  EXPECT_EQ(chipForTarget("sm_90a"), nullptr); // a chip, not a target
  EXPECT_EQ(findChip("sm_90"), nullptr);
  EXPECT_EQ(chipNames(ChipKind::Nvptx), "sm_90a, sm_100, sm_120");
}

} // namespace
} // namespace kiln
