// A kernel's tiling is written once, as its function's kiln.tiling
// attribute; the artifact's JSON is read from it, for kernels built as typed
// IR (buildKernel) and for those still written as text (textKernel) alike.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"

#include <gtest/gtest.h>

namespace kiln::kernels {
namespace {

TEST(KernelTiling, TextKernelsReadTheirAttribute) {
  KernelSpec spec = textKernel("k", "kiln.linear", R"(
func.func @k(%part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "mma-gemm", tile = [128, 128, 32], block = 256 : i64}} {
  return
}
)");
  // In the dictionary's order (by name), every field the kernel states.
  EXPECT_EQ(spec.tiling, R"({"block": 256, "kind": "mma-gemm", "tile": [128, 128, 32]})");
  EXPECT_EQ(spec.name, "k");
  EXPECT_EQ(spec.op, "kiln.linear");
}

TEST(KernelTiling, BuiltKernelsReadTheirAttribute) {
  Tiling tiling;
  tiling.set("stages", 4).set("kind", "wgmma-gemm").set("block", 384);
  KernelSpec spec = buildKernel(
      "b", "kiln.linear", tiling, [](mlir::Builder &) { return std::vector<mlir::Type>{}; },
      [](KernelScope &) {});
  EXPECT_EQ(spec.tiling, R"({"block": 384, "kind": "wgmma-gemm", "stages": 4})");
  EXPECT_NE(
      spec.mlir.find("kiln.tiling = {block = 384 : i64, kind = \"wgmma-gemm\", stages = 4 : i64}"),
      std::string::npos)
      << spec.mlir;
}

// Generated text kernels: the JSON is their attribute's, to the byte.
TEST(KernelTiling, GeneratedTextKernels) {
  EXPECT_EQ(castToBf16(64).tiling, R"({"kind": "rows", "lanes": 16})");
  EXPECT_EQ(castToBf16(8).tiling, R"({"kind": "rows", "lanes": 1})");
  EXPECT_EQ(greedyKeys().tiling, R"({"kind": "greedy"})");
}

TEST(KernelTilingDeathTest, ATextWithoutTilingIsAGeneratorBug) {
  EXPECT_DEATH(textKernel("k", "kiln.linear", "func.func @k() { return }"),
               "kernel 'k': its text has no kiln.tiling attribute");
}

} // namespace
} // namespace kiln::kernels
