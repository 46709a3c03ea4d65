// The FP8 KV cache's e4m3 codec as kernels build it (targets/common/
// KvCacheAccess.h: integer arithmetic, no FP8 instructions), compiled for
// this CPU: every one of the 256 codes decodes to kiln::e4m3ToFloat's value,
// bit for bit; encoding gives kiln::floatToE4m3's code (the interpreter's)
// for every f32 around each rounding boundary and each code, the specials
// (zeros, subnormals of both formats, 448 and beyond, infinities, NaN) and a
// million random magnitudes; roundAsCached with a scale is the interpreter's
// code-of(x / s) * s.
#include "runtime/core/Float.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KvCacheAccess.h"
#include "targets/x86/CpuTarget.h"
#include "targets/x86/KernelCompiler.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/bit.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace kiln::kernels {
namespace {

using namespace mlir;

constexpr int64_t kLanes = 16;
constexpr float kScale = 0.0375f;

// A kernel over n elements (n a multiple of 16), 16 at a time: x (f32) to
// codes (i8), codes to decoded (f32), x to rounded (f32, roundAsCached with
// kScale).
KernelSpec codecKernel() {
  auto args = [](Builder &b) -> std::vector<Type> {
    Type f32 = MemRefType::get({ShapedType::kDynamic}, b.getF32Type());
    Type i8 = MemRefType::get({ShapedType::kDynamic}, b.getI8Type());
    return {f32, i8, i8, f32, f32};
  };
  return buildKernel("e4m3_codec", "test", Tiling(), args, [](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    auto vf = VectorType::get({kLanes}, b.getF32Type());
    auto vi = VectorType::get({kLanes}, b.getI8Type());
    Value n = mlir::memref::DimOp::create(b, k.arg(0), k.index(0));
    auto loop = scf::ForOp::create(b, k.index(0), n, k.index(kLanes));
    b.setInsertionPointToStart(loop.getBody());
    Value i = loop.getInductionVar();
    Value x = vector::LoadOp::create(b, vf, k.arg(0), ValueRange{i});
    vector::StoreOp::create(b, encodeE4m3(b, x), k.arg(1), ValueRange{i});
    Value codes = vector::LoadOp::create(b, vi, k.arg(2), ValueRange{i});
    vector::StoreOp::create(b, decodeE4m3(b, codes), k.arg(3), ValueRange{i});
    vector::StoreOp::create(b, roundAsCached(b, x, KvStorage{KvElement::FP8, kScale}), k.arg(4),
                            ValueRange{i});
  });
}

class E4m3Codec : public ::testing::Test {
protected:
  void SetUp() override {
    std::string error;
    std::optional<x86::CpuTarget> cpu = x86::resolveCpu("host", error);
    ASSERT_TRUE(cpu) << error;
    MLIRContext context;
    x86::CompileOptions options;
    options.cpu = *cpu;
    ASSERT_TRUE(x86::compileKernelLibrary(context, {codecKernel()}, options, library, error))
        << error;
    loaded = std::make_unique<KernelLibrary>(
        KernelLibrary::load(library.data(), library.size(), "<e4m3 codec>"));
  }

  // Runs the kernel over `x` (padded to 16) and the codes 0, 1, ... wrapping.
  void run(std::vector<float> x) {
    while (x.size() % kLanes)
      x.push_back(0.0f);
    input = x;
    codes.assign(x.size(), 0);
    decoded.assign(x.size(), 0.0f);
    rounded.assign(x.size(), 0.0f);
    allCodes.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      allCodes[i] = static_cast<uint8_t>(i);
    kiln::memref::DescriptorStorage d[5];
    int64_t shape[1] = {static_cast<int64_t>(x.size())};
    int64_t part = 0, parts = 1;
    std::vector<void *> args{kiln::memref::buildDescriptor(d[0], input.data(), shape, 1),
                             kiln::memref::buildDescriptor(d[1], codes.data(), shape, 1),
                             kiln::memref::buildDescriptor(d[2], allCodes.data(), shape, 1),
                             kiln::memref::buildDescriptor(d[3], decoded.data(), shape, 1),
                             kiln::memref::buildDescriptor(d[4], rounded.data(), shape, 1),
                             &part,
                             &parts};
    loaded->resolve("kiln_e4m3_codec")(args.data());
  }

  std::vector<uint8_t> library;
  std::unique_ptr<KernelLibrary> loaded;
  std::vector<float> input, decoded, rounded;
  std::vector<uint8_t> codes, allCodes;
};

bool sameValue(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         llvm::bit_cast<uint32_t>(a) == llvm::bit_cast<uint32_t>(b);
}

TEST_F(E4m3Codec, DecodesEveryCodeAsTheHostDoes) {
  run(std::vector<float>(256, 0.0f));
  for (int c = 0; c < 256; ++c)
    EXPECT_TRUE(sameValue(decoded[c], e4m3ToFloat(static_cast<uint8_t>(c))))
        << "code 0x" << std::hex << c << ": " << decoded[c] << " vs "
        << e4m3ToFloat(static_cast<uint8_t>(c));
}

TEST_F(E4m3Codec, EncodesAsTheHostDoes) {
  std::vector<float> x;
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f, 1e-45f, 1e-38f, 1e-3f, 0.0009765625f, 0.00146484375f, 448.0f, 449.0f,
                  464.0f, 465.0f, 480.0f, 1e6f, 3.4e38f, inf, std::nanf("")})
    x.insert(x.end(), {v, -v});
  // Each code's value and its neighbours, and each midpoint between codes
  // (a tie: to the even code) and the f32 either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3ToFloat(static_cast<uint8_t>(c));
    const float hi = e4m3ToFloat(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    for (float v :
         {lo, std::nextafter(lo, inf), mid, std::nextafter(mid, 0.0f), std::nextafter(mid, inf)})
      x.insert(x.end(), {v, -v});
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (int i = 0; i < (1 << 20); ++i)
    x.push_back((i & 1 ? -1.0f : 1.0f) * mantissa(rng) * std::exp2(std::floor(exponent(rng))));
  run(x);
  int wrong = 0, wrongRounded = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (codes[i] != floatToE4m3(x[i]) && ++wrong <= 5)
      ADD_FAILURE() << x[i] << ": code 0x" << std::hex << int(codes[i]) << ", host 0x"
                    << int(floatToE4m3(x[i]));
    const float want = e4m3ToFloat(floatToE4m3(x[i] / kScale)) * kScale;
    if (!sameValue(rounded[i], want) && ++wrongRounded <= 5)
      ADD_FAILURE() << x[i] << " rounded with scale " << kScale << ": " << rounded[i]
                    << ", the interpreter's " << want;
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(wrongRounded, 0);
}

} // namespace
} // namespace kiln::kernels
