// kiln.attention's kv_type: the interpreter reads keys and values as a cache
// of that element type holds them, the call's own included; an FP8 cache
// with its kv_scales.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>

namespace kiln::interp {
namespace {

// Three tokens, two query heads over one KV head of four dims.
std::string attentionIr(const std::string &kvType) {
  return R"(
    func.func @f(%q: tensor<3x2x4xf32>, %k: tensor<3x1x4xf32>, %v: tensor<3x1x4xf32>,
                 %p: tensor<3xi32>) -> tensor<3x2x4xf32> {
      %a = kiln.attention %q, %k, %v, %p {)" +
         kvType + R"(scale = 0.5 : f64}
             : tensor<3x2x4xf32>, tensor<3x1x4xf32>, tensor<3x1x4xf32>, tensor<3xi32>
               -> tensor<3x2x4xf32>
      return %a : tensor<3x2x4xf32>
    })";
}

// Values with bits below bf16's eight-bit mantissa.
HostTensor fine(std::vector<int64_t> shape, float seed) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = seed * (1.0f + 0.001953f * float(i * 7 % 13)) * (i % 3 == 0 ? -1.0f : 1.0f) +
           0.0004f * float(i);
  return HostTensor::floats(std::move(shape), std::move(v));
}

class KvTypeTest : public ::testing::Test {
protected:
  KvTypeTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }

  HostTensor run(const std::string &kvType) {
    module = mlir::parseSourceString<mlir::ModuleOp>(attentionIr(kvType), &context);
    EXPECT_TRUE(module);
    auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
    return interpreter.run(f, {q, k, v, positions}).at(0);
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  MapWeights weights;
  Interpreter interpreter{weights};
  HostTensor q = fine({3, 2, 4}, 0.71f), k = fine({3, 1, 4}, 1.37f), v = fine({3, 1, 4}, 0.53f);
  HostTensor positions = HostTensor::ints({3}, {0, 1, 2});
};

TEST_F(KvTypeTest, Bf16CacheRoundsKeysAndValues) {
  HostTensor cached = run("kv_type = bf16, ");
  HostTensor expected = attention(q, roundToBf16(k), roundToBf16(v), positions, 0.5, std::nullopt);
  EXPECT_EQ(cached.f, expected.f);
  // And that differs from exact keys: the rounding is real.
  HostTensor exact = attention(q, k, v, positions, 0.5, std::nullopt);
  EXPECT_NE(cached.f, exact.f);
}

TEST_F(KvTypeTest, Fp8CacheRoundsKeysAndValuesWithTheirOwnScales) {
  HostTensor cached = run("kv_type = f8E4M3FN, kv_scales = array<f64: 0.3, 0.07>, ");
  HostTensor expected =
      attention(q, roundToE4m3(k, 0.3f), roundToE4m3(v, 0.07f), positions, 0.5, std::nullopt);
  EXPECT_EQ(cached.f, expected.f);
  // The scales matter, each on its own tensor: swapped, or none (1), the
  // codes are others (a power of two would not move e4m3's relative grid,
  // short of subnormals and saturation: these are not).
  EXPECT_NE(run("kv_type = f8E4M3FN, kv_scales = array<f64: 0.07, 0.3>, ").f, cached.f);
  HostTensor unscaled = run("kv_type = f8E4M3FN, ");
  EXPECT_EQ(unscaled.f,
            attention(q, roundToE4m3(k, 1), roundToE4m3(v, 1), positions, 0.5, std::nullopt).f);
  EXPECT_NE(unscaled.f, cached.f);
  // And e4m3 is coarser than bf16.
  EXPECT_NE(cached.f, run("kv_type = bf16, ").f);
}

TEST_F(KvTypeTest, Fp8RoundingIsTheCodeTimesTheScale) {
  HostTensor x = HostTensor::floats({5}, {1.0f, 0.3f, -1000.0f, 0.001f, 0.0002f});
  // 0.3 / 0.5 = 0.6 lies between the codes 0.5625 and 0.625 (nearer the
  // latter); -1000 / 0.5 saturates at -448; 0.001 / 0.5 is about the
  // smallest subnormal, 2^-9; 0.0002 / 0.5 is below half of it and rounds
  // to zero.
  EXPECT_EQ(roundToE4m3(x, 0.5f).f,
            (std::vector<float>{1.0f, 0.3125f, -224.0f, 0.0009765625f, 0.0f}));
}

TEST_F(KvTypeTest, F32CacheAndNoneAreExact) {
  HostTensor exact = attention(q, k, v, positions, 0.5, std::nullopt);
  EXPECT_EQ(run("kv_type = f32, ").f, exact.f);
  EXPECT_EQ(run("").f, exact.f);
}

} // namespace
} // namespace kiln::interp
