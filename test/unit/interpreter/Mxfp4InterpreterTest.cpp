// The interpreter on a seeded muse-spark-tiny NVFP4 checkpoint whose expert
// weights are converted to MXFP4 (Mxfp4ConvertedWeights): the converted
// tensors decode to exactly the MXFP4 values, and the logits stay close to
// the NVFP4 run's.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnDialect.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/GraphBuilder.h"
#include "runtime/core/Float.h"
#include "runtime/quant/Mxfp4.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

namespace kiln::interp {
namespace {

using muse_spark::Config;
using muse_spark::WeightFormat;

constexpr uint64_t kSeed = 11;

// Counts the loads that reach the wrapped source.
class CountingWeights : public WeightSource {
public:
  explicit CountingWeights(WeightSource &base) : base(base) {}
  HostTensor load(const std::string &name) override {
    ++loads;
    return base.load(name);
  }
  int loads = 0;

private:
  WeightSource &base;
};

class Mxfp4InterpreterTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    dir = new std::string(std::filesystem::temp_directory_path() /
                          ("kiln-mxfp4-interpreter-test-" + std::to_string(::getpid())));
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

  Mxfp4InterpreterTest() { context.loadDialect<KilnDialect, mlir::func::FuncDialect>(); }

  // Logits [T, V] of a prefill of `ids` at positions 0..T-1.
  HostTensor prefill(WeightSource &weights, const std::vector<int32_t> &ids, WeightFormat format) {
    muse_spark::GraphOptions options;
    options.tokens = mlir::ShapedType::kDynamic;
    options.format = format;
    modules.push_back(muse_spark::buildForwardGraph(context, *config, options));
    auto forward = modules.back()->lookupSymbol<mlir::func::FuncOp>("forward");
    int64_t n = static_cast<int64_t>(ids.size());
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    Interpreter interpreter(weights);
    return interpreter.run(forward, {HostTensor::ints({n}, ids), HostTensor::ints({n}, positions)})
        .at(0);
  }

  static std::vector<int32_t> prompt() { return {5, 900, 17, 17, 256, 3, 1023, 42, 77, 600, 8, 1}; }

  static std::string *dir;
  static Config *config;
  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
};

std::string *Mxfp4InterpreterTest::dir = nullptr;
Config *Mxfp4InterpreterTest::config = nullptr;

double relativeRms(const std::vector<float> &a, const std::vector<float> &b) {
  double diff = 0, ref = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    diff += (a[k] - b[k]) * double(a[k] - b[k]);
    ref += double(b[k]) * b[k];
  }
  return std::sqrt(diff / ref);
}

// One expert projection of a quantised layer, as the interpreter loads it:
// the converted triple decodes (with the interpreter's nvfp4Dequant) to
// exactly dequantizeMxfp4(nvfp4ToMxfp4(the NVFP4 tensors)).
TEST_F(Mxfp4InterpreterTest, ConvertedTripleDecodesToTheMxfp4Values) {
  CheckpointWeights nvfp4(*dir + "/nvfp4");
  CountingWeights counting(nvfp4);
  Mxfp4ConvertedWeights mxfp4(counting);
  const std::string module = "model.layers.1.mlp.experts.7.down_proj";
  HostTensor packed = mxfp4.load(module + ".weight");
  HostTensor scales = mxfp4.load(module + ".weight_scale");
  HostTensor global = mxfp4.load(module + ".weight_scale_2");
  EXPECT_EQ(counting.loads, 3); // one conversion, then from the cache
  EXPECT_EQ(mxfp4.load(module + ".weight").i, packed.i);
  EXPECT_EQ(counting.loads, 3);

  HostTensor nvPacked = nvfp4.load(module + ".weight");
  HostTensor nvScales = nvfp4.load(module + ".weight_scale");
  HostTensor nvGlobal = nvfp4.load(module + ".weight_scale_2");
  ASSERT_EQ(packed.shape, nvPacked.shape);
  ASSERT_EQ(scales.shape, nvScales.shape);
  ASSERT_EQ(global.shape, nvGlobal.shape);
  ASSERT_EQ(global.f, std::vector<float>{1.0f});
  const int64_t rows = packed.dim(0), cols = 2 * packed.dim(1);

  // The reference: the library conversion of the checkpoint's bytes (the
  // interpreter's decoded e4m3 scales re-encode exactly).
  std::vector<uint8_t> bytes(nvPacked.i.begin(), nvPacked.i.end()), scaleCodes;
  for (float s : nvScales.f)
    scaleCodes.push_back(floatToE4m3(s));
  Mxfp4Matrix mx = nvfp4ToMxfp4(bytes.data(), scaleCodes.data(), nvGlobal.f[0], rows, cols);
  std::vector<float> expected(rows * cols);
  dequantizeMxfp4(mx.packed.data(), mx.scales.data(), rows, cols, expected.data());
  EXPECT_EQ(nvfp4Dequant(packed, scales, global).f, expected);

  for (int64_t k = 0; k < scales.numElements(); ++k) {
    int exponent;
    ASSERT_EQ(std::frexp(scales.f[k], &exponent), 0.5f) << "scale " << k; // a power of two
    if (k % 2 == 1) {
      ASSERT_EQ(scales.f[k], scales.f[k - 1]) << "scale " << k; // one per 32
    }
  }
  EXPECT_NE(nvfp4Dequant(packed, scales, global).f, nvfp4Dequant(nvPacked, nvScales, nvGlobal).f);

  // BF16 tensors (the experts of layer 0, attention) pass through.
  EXPECT_EQ(mxfp4.load("model.layers.0.mlp.experts.3.up_proj.weight").f,
            nvfp4.load("model.layers.0.mlp.experts.3.up_proj.weight").f);
  EXPECT_EQ(mxfp4.load("model.layers.2.self_attn.q_proj.weight").f,
            nvfp4.load("model.layers.2.self_attn.q_proj.weight").f);
  EXPECT_THROW(mxfp4.load("model.layers.0.mlp.experts.3.up_proj.weight_scale"), InterpreterError);
}

// The MXFP4 run moves the logits by about what NVFP4 itself does. Only the
// expert weights of layers 1..L-2 are quantised, and the logits' relative
// change follows the weights' relative error: NVFP4 is ~0.095 off BF16 per
// matrix and its logits 0.103 off (ModelTest bounds that at 0.15). The
// requantisation is ~0.12 off NVFP4 per matrix and ~0.153 off BF16
// (Mxfp4Test), so the MXFP4 logits should be ~0.13 off the NVFP4 ones and
// ~0.165 off BF16; measured 0.115 and 0.156. Bounds 0.15 and 0.2: a 0.1
// bound would need a conversion better than a requantisation can be.
TEST_F(Mxfp4InterpreterTest, Mxfp4LogitsStayCloseToNvfp4) {
  CheckpointWeights bf16(*dir + "/bf16"), nvfp4(*dir + "/nvfp4");
  Mxfp4ConvertedWeights mxfp4(nvfp4);
  HostTensor base = prefill(bf16, prompt(), WeightFormat::BF16);
  HostTensor nv = prefill(nvfp4, prompt(), WeightFormat::NVFP4);
  HostTensor mx = prefill(mxfp4, prompt(), WeightFormat::NVFP4);
  ASSERT_EQ(mx.shape, (std::vector<int64_t>{12, 1024}));
  for (float v : mx.f)
    ASSERT_TRUE(std::isfinite(v));
  const double relNv = relativeRms(mx.f, nv.f);
  const double relBf16 = relativeRms(mx.f, base.f);
  std::printf("logits relative RMS: NVFP4 vs BF16 %.4f, MXFP4 vs NVFP4 %.4f, "
              "MXFP4 vs BF16 %.4f\n",
              relativeRms(nv.f, base.f), relNv, relBf16);
  EXPECT_GT(relNv, 1e-3); // the conversion really happened
  EXPECT_LT(relNv, 0.15);
  EXPECT_LT(relBf16, 0.2);
}

} // namespace
} // namespace kiln::interp
