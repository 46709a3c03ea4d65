// A kernel's tiling is written once, as its function's kiln.tiling
// attribute (buildKernel); the artifact's JSON is read from it.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"

#include <gtest/gtest.h>

namespace kiln::kernels {
namespace {

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

// Generated kernels: the JSON is their attribute's, to the byte.
TEST(KernelTiling, GeneratedKernels) {
  EXPECT_EQ(castToBf16(64).tiling, R"({"kind": "rows", "lanes": 16})");
  EXPECT_EQ(castToBf16(8).tiling, R"({"kind": "rows", "lanes": 1})");
  EXPECT_EQ(greedyKeys().tiling, R"({"kind": "greedy"})");
}

} // namespace
} // namespace kiln::kernels
