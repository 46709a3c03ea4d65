// kiln.head_norm_rope's kernel is composed from the row stages of head_norm
// and rope (targets/common/HeadRowKernels.h), not written for the fused op.
// On this CPU: the composed kernel gives the reference interpreter's
// rope(rms_norm(x)) and what the two ops' own kernels give one after the
// other (the generic RMSNorm kernel, then rope as a single-stage kernel), for
// a head_dim of one chunk and of several, over several launch parts;
// composing the stages in the wrong order fails the same comparison.
#include "compiler/interpreter/ReferenceOps.h"
#include "runtime/core/Float.h"
#include "runtime/cpu/KernelLibrary.h"
#include "runtime/cpu/MemRef.h"
#include "targets/common/Generators.h"
#include "targets/common/HeadRowKernels.h"
#include "targets/x86/CpuTarget.h"
#include "targets/x86/KernelCompiler.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace kiln::kernels {
namespace {

constexpr int64_t kTokens = 7, kHeads = 3;
constexpr double kEps = 1e-5, kTheta = 1e6;

struct Inputs {
  std::vector<float> x;
  std::vector<uint16_t> w;
  std::vector<int32_t> positions;
};

Inputs makeInputs(int64_t headDim) {
  std::mt19937 rng(static_cast<uint32_t>(headDim));
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Inputs in;
  in.x.resize(size_t(kTokens * kHeads * headDim));
  for (float &v : in.x)
    v = normal(rng);
  for (int64_t j = 0; j < headDim; ++j)
    in.w.push_back(floatToBf16(1.0f + 0.25f * normal(rng)));
  for (int64_t t = 0; t < kTokens; ++t)
    in.positions.push_back(int32_t(t * 37 + 5)); // angles well past 2π
  return in;
}

class HeadRowKernels : public ::testing::TestWithParam<int64_t> {
protected:
  void SetUp() override {
    headDim = GetParam();
    std::string error;
    std::optional<x86::CpuTarget> cpu = x86::resolveCpu("host", error);
    ASSERT_TRUE(cpu) << error;
    fused = headRowThreads("kiln.head_norm_rope", kHeads, headDim,
                           {headNormStage(headDim, kEps), ropeStage(headDim, kTheta)});
    reversed = headRowThreads("kiln.rope_head_norm", kHeads, headDim,
                              {ropeStage(headDim, kTheta), headNormStage(headDim, kEps)});
    norm = headNorm(kHeads, headDim, kEps);
    rotate = headRowThreads("kiln.rope", kHeads, headDim, {ropeStage(headDim, kTheta)});
    mlir::MLIRContext context;
    x86::CompileOptions options;
    options.cpu = *cpu;
    ASSERT_TRUE(x86::compileKernelLibrary(context, {fused, reversed, norm, rotate}, options,
                                          library, error))
        << error;
    loaded = std::make_unique<KernelLibrary>(
        KernelLibrary::load(library.data(), library.size(), "<head rows>"));
    in = makeInputs(headDim);
  }

  // One kernel over all rows in `parts` launch parts. `extra` is the
  // argument between x and y: the weight, the positions, or both.
  void run(const KernelSpec &kernel, const std::vector<float> &x, std::vector<void *> extra,
           std::vector<float> &y, int parts) {
    KernelFn fn = loaded->resolve("kiln_" + kernel.name);
    y.assign(x.size(), 0.0f);
    for (int part = 0; part < parts; ++part) {
      memref::DescriptorStorage dx, dy;
      int64_t shape[3] = {kTokens, kHeads, headDim};
      int64_t rows = kTokens, p = part, ps = parts;
      std::vector<void *> args{
          memref::buildDescriptor(dx, const_cast<float *>(x.data()), shape, 3)};
      args.insert(args.end(), extra.begin(), extra.end());
      args.push_back(memref::buildDescriptor(dy, y.data(), shape, 3));
      args.push_back(&rows);
      args.push_back(&p);
      args.push_back(&ps);
      fn(args.data());
    }
  }

  void *weightArg() {
    int64_t shape[1] = {headDim};
    return memref::buildDescriptor(dw, in.w.data(), shape, 1);
  }
  void *positionsArg() {
    int64_t shape[1] = {kTokens};
    return memref::buildDescriptor(dp, in.positions.data(), shape, 1);
  }

  std::vector<float> reference() const {
    std::vector<float> w;
    for (uint16_t v : in.w)
      w.push_back(bf16ToFloat(v));
    interp::HostTensor x = interp::HostTensor::floats({kTokens, kHeads, headDim}, in.x);
    interp::HostTensor weight = interp::HostTensor::floats({headDim}, w);
    interp::HostTensor positions = interp::HostTensor::ints({kTokens}, in.positions);
    return interp::rope(interp::rmsNorm(x, weight, kEps), positions, kTheta).f;
  }

  // The largest difference relative to the largest reference magnitude.
  static double relative(const std::vector<float> &got, const std::vector<float> &want) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, double(std::abs(got[i] - want[i])));
      scale = std::max(scale, double(std::abs(want[i])));
    }
    return worst / scale;
  }

  int64_t headDim = 0;
  KernelSpec fused, reversed, norm, rotate;
  std::vector<uint8_t> library;
  std::unique_ptr<KernelLibrary> loaded;
  Inputs in;
  memref::DescriptorStorage dw, dp;
};

TEST_P(HeadRowKernels, ComposedKernelMatchesTheReferenceAndTheTwoKernels) {
  std::vector<float> normed, separate;
  run(norm, in.x, {weightArg()}, normed, 2);
  run(rotate, normed, {positionsArg()}, separate, 2);
  const std::vector<float> want = reference();
  EXPECT_LT(relative(separate, want), 1e-5);
  for (int parts : {1, 3, int(kTokens) + 2}) {
    std::vector<float> composed;
    run(fused, in.x, {weightArg(), positionsArg()}, composed, parts);
    EXPECT_LT(relative(composed, want), 1e-5) << parts << " parts";
    EXPECT_LT(relative(composed, separate), 1e-5) << parts << " parts";
  }
}

TEST_P(HeadRowKernels, StagesInTheWrongOrderFailTheComparison) {
  std::vector<float> composed;
  run(reversed, in.x, {positionsArg(), weightArg()}, composed, 1);
  EXPECT_GT(relative(composed, reference()), 1e-2);
}

// Tiny's head_dim (one 8-wide chunk a half) and the model's.
INSTANTIATE_TEST_SUITE_P(HeadDims, HeadRowKernels, ::testing::Values(16, 32, 128));

TEST(HeadRowKernelNames, SayTheStagesTheyCompose) {
  KernelSpec spec =
      headRowWarp("kiln.head_norm_rope", 96, 128, {headNormStage(128, 1e-5), ropeStage(128, 1e7)});
  EXPECT_EQ(spec.name, "head_norm_rope_warp_96x128_norm_eps10000_rope_theta10000000");
  EXPECT_EQ(spec.op, "kiln.head_norm_rope");
  EXPECT_NE(spec.mlir.find("gpu.shuffle"), std::string::npos);
  EXPECT_EQ(spec.mlir.find("@@"), std::string::npos);
}

} // namespace
} // namespace kiln::kernels
