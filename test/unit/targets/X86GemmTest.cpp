// The x86 GEMM families (targets/x86: AMX tiles, AVX-512 BF16 dot products,
// FMA over split pairs), compiled for a CPU of each family on any machine, and
// run for every family this CPU has (an AVX-512 BF16 machine runs the FMA
// family too; an AMX one all three) against a scalar reference on the same
// bf16 inputs: only the order of the f32 sums differs, so the results agree
// to 1e-5 of the shape's largest value. Shapes cover whole and partial register blocks of rows,
// panels of every width the tilings choose, and parts that get no panel. A kernel fed weights in
// the wrong layout must fail the same comparison.
#include "runtime/core/Float.h"
#include "runtime/cpu/CpuFeatures.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "runtime/engine/WeightLayout.h"
#include "targets/x86/CpuTarget.h"
#include "targets/x86/KernelCompiler.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kiln::x86 {
namespace {

struct Shape {
  int64_t rows, n, k;
};

// Rows: one (decode), a partial block, whole blocks plus a rest; n: one
// tile, 3, 6, 12 and 2000 tiles (every panel width); k: 1 to 8 VNNI blocks.
const Shape kShapes[] = {{1, 16, 32},    {1, 192, 256}, {5, 96, 64},     {7, 48, 96},
                         {13, 256, 128}, {16, 512, 64}, {25, 1024, 256}, {3, 2000 * 16, 32},
                         {20, 192, 256}, {20, 256, 192}};

bool hostRuns(const CpuTarget &cpu) {
  for (const std::string &feature : cpu.features)
    if (!cpuHasFeature(feature).value_or(false))
      return false;
  return true;
}

// The largest difference from the reference, relative to the largest
// reference magnitude of the shape.
class X86Gemm : public ::testing::TestWithParam<std::string> {
protected:
  void SetUp() override {
    std::string error;
    std::optional<CpuTarget> resolved = resolveCpu(GetParam(), error);
    ASSERT_TRUE(resolved) << error;
    cpu = *resolved;
    X86Hooks hooks(cpu);
    family = hooks.gemmFamily();
    for (const Shape &s : kShapes) {
      // A prefill's GEMM: the family under test, not decode's.
      std::optional<kernels::TargetHooks::TiledGemm> gemm = hooks.tiledGemm(s.n, s.k, false);
      ASSERT_TRUE(gemm) << s.n << "x" << s.k;
      gemms.push_back(*gemm);
    }
  }

  void compileAndLoad() {
    std::vector<kernels::KernelSpec> specs;
    for (const auto &gemm : gemms)
      specs.push_back(gemm.kernel);
    mlir::MLIRContext context;
    CompileOptions options;
    options.cpu = cpu;
    std::string error;
    ASSERT_TRUE(compileKernelLibrary(context, specs, options, library, error)) << error;
    if (needsAmx(cpu.features))
      requestAmx();
    loaded = std::make_unique<KernelLibrary>(
        KernelLibrary::load(library.data(), library.size(), "<gemm>"));
  }

  // Runs shape i with `parts` parts (some may get no panel) and returns the
  // largest difference from the reference relative to its largest value.
  double relativeError(size_t i, int parts, bool vnniLayout = true) {
    const Shape &s = kShapes[i];
    std::mt19937 rng(static_cast<uint32_t>(i + 1));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    const int64_t padded = (s.rows + 15) / 16 * 16;
    std::vector<uint16_t> a(size_t(padded * s.k), 0), w(size_t(s.n * s.k)), packed(w.size());
    for (int64_t j = 0; j < s.rows * s.k; ++j)
      a[size_t(j)] = floatToBf16(normal(rng));
    for (uint16_t &x : w)
      x = floatToBf16(normal(rng));
    if (vnniLayout)
      vnniBf16Blocks(w.data(), s.n, s.k, packed.data());
    else
      packed = w; // a broken kernel's view: the checkpoint's own layout
    std::vector<float> y(size_t(padded * s.n), 0.0f);
    KernelFn fn = loaded->resolve("kiln_" + gemms[i].kernel.name);
    for (int part = 0; part < parts; ++part) {
      memref::DescriptorStorage da, dw, dy;
      int64_t sa[2] = {padded, s.k}, sw[2] = {s.n * s.k / 32, 32}, sy[2] = {padded, s.n};
      int64_t rows = s.rows, p = part, ps = parts;
      void *args[6] = {memref::buildDescriptor(da, a.data(), sa, 2),
                       memref::buildDescriptor(dw, packed.data(), sw, 2),
                       memref::buildDescriptor(dy, y.data(), sy, 2),
                       &rows,
                       &p,
                       &ps};
      fn(args);
    }
    double worst = 0, scale = 0;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = 0; c < s.n; ++c) {
        double ref = 0;
        for (int64_t j = 0; j < s.k; ++j)
          ref += double(bf16ToFloat(a[size_t(r * s.k + j)])) * bf16ToFloat(w[size_t(c * s.k + j)]);
        worst = std::max(worst, std::abs(ref - y[size_t(r * s.n + c)]));
        scale = std::max(scale, std::abs(ref));
      }
    return worst / scale;
  }

  CpuTarget cpu;
  GemmFamily family = GemmFamily::Vector;
  std::vector<kernels::TargetHooks::TiledGemm> gemms;
  std::vector<uint8_t> library;
  std::unique_ptr<KernelLibrary> loaded;
};

TEST_P(X86Gemm, MatchesTheReferenceOnEveryShape) {
  ASSERT_NO_FATAL_FAILURE(compileAndLoad());
  for (size_t i = 0; i < std::size(kShapes); ++i)
    for (int parts : {1, 3, 64}) {
      const Shape &s = kShapes[i];
      EXPECT_LT(relativeError(i, parts), 1e-5)
          << gemms[i].kernel.name << " rows " << s.rows << ", " << parts << " parts";
    }
}

TEST_P(X86Gemm, WeightsInTheWrongLayoutFailTheComparison) {
  ASSERT_NO_FATAL_FAILURE(compileAndLoad());
  EXPECT_GT(relativeError(1, 2, /*vnniLayout=*/false), 0.1);
}

// A CPU of each family (sapphirerapids: AMX, znver4: AVX-512 BF16, x86-64-v4
// and -v3: FMA on zmm and ymm) that this machine runs, and the host itself.
std::vector<std::string> cpusThisMachineRuns() {
  std::vector<std::string> names = {"host"};
  for (const char *name : {"sapphirerapids", "znver4", "x86-64-v4", "x86-64-v3"}) {
    std::string error;
    if (std::optional<CpuTarget> cpu = resolveCpu(name, error); cpu && hostRuns(*cpu))
      names.push_back(name);
  }
  return names;
}

INSTANTIATE_TEST_SUITE_P(Cpus, X86Gemm, ::testing::ValuesIn(cpusThisMachineRuns()),
                         [](const ::testing::TestParamInfo<std::string> &info) {
                           std::string name = info.param;
                           for (char &c : name)
                             if (c == '-')
                               c = '_';
                           return name;
                         });

// On an AMX CPU, a decode step's GEMMs (decode, batched decode, verify)
// take AVX-512 BF16 dot products, prefill's AMX tiles; other CPUs one family
// for all.
TEST(X86GemmFamily, DecodeOnAmxCpusTakesAvx512Bf16) {
  std::string error;
  std::optional<CpuTarget> spr = resolveCpu("sapphirerapids", error);
  ASSERT_TRUE(spr) << error;
  X86Hooks amx(*spr);
  EXPECT_EQ(amx.familyFor(true), GemmFamily::Avx512Bf16);
  EXPECT_EQ(amx.familyFor(false), GemmFamily::Amx);
  EXPECT_NE(amx.tiledGemm(192, 256, true)->kernel.name.find("avx512bf16"), std::string::npos);
  EXPECT_NE(amx.tiledGemm(192, 256, false)->kernel.name.find("amx"), std::string::npos);
  std::optional<CpuTarget> zen = resolveCpu("znver4", error);
  ASSERT_TRUE(zen) << error;
  EXPECT_EQ(X86Hooks(*zen).familyFor(true), GemmFamily::Avx512Bf16);
  EXPECT_EQ(X86Hooks(*zen).familyFor(false), GemmFamily::Avx512Bf16);
}

// Every family's kernels compile whatever this machine is (test/targets/x86
// reads their disassembly); a CPU without FMA has no tiled GEMM.
TEST(X86GemmFamily, EveryFamilyCompilesOnAnyMachine) {
  for (const char *name : {"sapphirerapids", "znver4", "x86-64-v4", "x86-64-v3", "x86-64"}) {
    std::string error;
    std::optional<CpuTarget> cpu = resolveCpu(name, error);
    ASSERT_TRUE(cpu) << error;
    X86Hooks hooks(*cpu);
    std::optional<kernels::TargetHooks::TiledGemm> gemm = hooks.tiledGemm(192, 256, false);
    if (hooks.gemmFamily() == GemmFamily::Vector) {
      EXPECT_FALSE(gemm) << name;
      continue;
    }
    ASSERT_TRUE(gemm) << name;
    EXPECT_NE(gemm->kernel.name.find(gemmFamilyName(hooks.gemmFamily())), std::string::npos);
    mlir::MLIRContext context;
    CompileOptions options;
    options.cpu = *cpu;
    std::vector<uint8_t> library;
    EXPECT_TRUE(compileKernelLibrary(context, {gemm->kernel}, options, library, error))
        << name << ": " << error;
    EXPECT_GT(library.size(), 1000u) << name;
  }
}

TEST(X86GemmFamily, ChosenFromTheFeatures) {
  auto familyOf = [](const char *name) {
    std::string error;
    std::optional<CpuTarget> cpu = resolveCpu(name, error);
    EXPECT_TRUE(cpu) << error;
    return gemmFamilyFor(*cpu);
  };
  EXPECT_EQ(familyOf("sapphirerapids"), GemmFamily::Amx);
  EXPECT_EQ(familyOf("graniterapids"), GemmFamily::Amx);
  EXPECT_EQ(familyOf("znver4"), GemmFamily::Avx512Bf16);
  EXPECT_EQ(familyOf("znver5"), GemmFamily::Avx512Bf16);
  EXPECT_EQ(familyOf("cooperlake"), GemmFamily::Avx512Bf16);
  EXPECT_EQ(familyOf("x86-64-v4"), GemmFamily::Fma);
  EXPECT_EQ(familyOf("x86-64-v3"), GemmFamily::Fma);
  EXPECT_EQ(familyOf("x86-64"), GemmFamily::Vector);
}

} // namespace
} // namespace kiln::x86
