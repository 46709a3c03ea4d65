// The engine on an AMD GPU (ctest label "hip"; every test skips where there
// is no AMD GPU, and where llc and ld.lld for amdgcn were not found at
// configure time): the test model of NvptxTestArtifact.h with its kernels in
// LLVM IR (kAmdgcnTestKernels), compiled for the device's chip, runs prefill
// in chunks and decode steps (direct, recorded as a HIP graph, replayed with
// PastTokens updated), checked against the same arithmetic on the host; then
// what the device refuses.
//
// No AMD GPU has been reachable from this project so far: these tests have
// only ever skipped.
#include "runtime/engine/Engine.h"

#include "models/muse_spark/SyntheticWeights.h"
#include "runtime/core/Float.h"
#include "runtime/hip/AmdgcnArtifact.h"
#include "runtime/hip/HipDriver.h"

#include "test/unit/runtime_hip/AmdgcnTestArtifact.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

namespace kiln {
namespace {

using namespace kiln::hip_test;

// The kernels' arithmetic on the host: the KV cache holds the embedding of
// every token so far; logit v is one fma chain over its rows and columns.
class Reference {
public:
  explicit Reference(uint64_t seed) {
    const muse_spark::Config config = muse_spark::loadConfig("muse-spark-tiny");
    embed_ = weight(config, "model.embed_tokens.weight", seed);
    lm_ = weight(config, "lm_head.weight", seed);
  }

  std::vector<float> append(const std::vector<int32_t> &tokens) {
    history_.insert(history_.end(), tokens.begin(), tokens.end());
    std::vector<float> logits(kVocab);
    for (int64_t v = 0; v < kVocab; ++v) {
      float sum = 0;
      for (int32_t token : history_)
        for (int64_t h = 0; h < kHidden; ++h)
          sum = std::fma(embed_[token * kHidden + h], lm_[v * kHidden + h], sum);
      logits[v] = sum;
    }
    return logits;
  }

private:
  static std::vector<float> weight(const muse_spark::Config &config, const std::string &name,
                                   uint64_t seed) {
    for (const auto &spec : muse_spark::checkpointManifest(config, muse_spark::WeightFormat::BF16))
      if (spec.name == name) {
        std::vector<uint16_t> bits(spec.shape[0] * spec.shape[1]);
        muse_spark::synthesizeTensor(config, spec, seed, reinterpret_cast<uint8_t *>(bits.data()));
        std::vector<float> values;
        for (uint16_t b : bits)
          values.push_back(bf16ToFloat(b));
        return values;
      }
    ADD_FAILURE() << name;
    return {};
  }

  std::vector<float> embed_, lm_;
  std::vector<int32_t> history_;
};

void expectLogits(const std::vector<float> &actual, const std::vector<float> &expected,
                  const std::string &what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t v = 0; v < actual.size(); ++v)
    ASSERT_NEAR(actual[v], expected[v], 1e-5 * (1 + std::abs(expected[v])))
        << what << ", logit " << v;
}

std::vector<int32_t> prompt(int count) {
  std::vector<int32_t> ids;
  for (int i = 0; i < count; ++i)
    ids.push_back((37 * i + 11) % kVocab);
  return ids;
}

class HipEngineTest : public ::testing::Test {
protected:
  void SetUp() override {
    std::shared_ptr<const hip::HipDriver> driver;
    try {
      driver = hip::HipDriver::system();
    } catch (const hip::HipUnavailable &error) {
      GTEST_SKIP() << "no AMD GPU: " << error.what();
    }
    hip::DeviceProperties properties;
    if (driver->properties(0, properties) != hip::kSuccess)
      GTEST_SKIP() << "no AMD GPU 0";
    gcnArchName_ = std::string(properties.gcnArchName,
                               ::strnlen(properties.gcnArchName, sizeof properties.gcnArchName));
    chip_ = std::string(hip::archOf(gcnArchName_));
    if (!isKnownAmdgcnChip(chip_))
      GTEST_SKIP() << "device 0 is " << gcnArchName_ << "; the runtime runs gfx942 and gfx950";
    if (!haveAmdgpuTools())
      GTEST_SKIP() << "no llc / ld.lld for amdgcn to build the test kernels";
    std::string error;
    hsaco_ = compileHsaco(chip_, error);
    ASSERT_FALSE(hsaco_.empty()) << error;
  }

  std::unique_ptr<Engine> make(const TestArtifact &a, EngineOptions options = {}) {
    options.weights = "synthetic:5";
    options.contextLength = 64;
    return Engine::create(amdgcnArtifact(a), options);
  }
  std::unique_ptr<Engine> make() { return make(amdgcnTestArtifact(hsaco_, chip_)); }

  std::string gcnArchName_, chip_;
  std::vector<uint8_t> hsaco_;
};

TEST_F(HipEngineTest, PrefillAndDecodeMatchReference) {
  auto engine = make();
  EXPECT_HAS(engine->device(), "(" + gcnArchName_ + ", ");
  EXPECT_HAS(engine->device(), "device 0)");
  Reference reference(5);
  // 11 tokens: chunks of 8 and 3.
  const std::vector<int32_t> ids = prompt(11);
  expectLogits(engine->prefill(ids), reference.append(ids), "prefill");
  // Decode: direct, recorded, then replayed with PastTokens updated.
  for (int step = 0; step < 5; ++step) {
    const int32_t token = (7 * step + 3) % kVocab;
    expectLogits(engine->decode(token), reference.append({token}),
                 "decode step " + std::to_string(step));
  }
  EXPECT_EQ(engine->pastTokens(), 16);
  engine->reset();
  Reference again(5);
  expectLogits(engine->prefill(prompt(3)), again.append(prompt(3)), "after reset");
}

TEST_F(HipEngineTest, RefusesTheOtherChip) {
  const std::string other = chip_ == "gfx942" ? "gfx950" : "gfx942";
  std::string error;
  const std::vector<uint8_t> hsaco = compileHsaco(other, error);
  ASSERT_FALSE(hsaco.empty()) << error;
  const std::string message = errorOf([&] { make(amdgcnTestArtifact(hsaco, other)); });
  EXPECT_HAS(message, "gpu.kiln: artifact is for amdgcn " + other +
                          ", which this machine cannot run: device 0 (");
  EXPECT_HAS(message,
             ") is " + gcnArchName_ + "; " + other + " code runs only on " + other + " devices");
}

TEST_F(HipEngineTest, MissingKernelAndDevice) {
  TestArtifact a = amdgcnTestArtifact(hsaco_, chip_);
  a.kernels[2].name = "kiln_absent";
  EXPECT_HAS(errorOf([&] { make(a); }), "gpu.kiln: kernel 'kiln_absent' (not in the code object?): "
                                        "hipModuleGetFunction: ");
  EngineOptions options;
  options.device = 99;
  EXPECT_HAS(errorOf([&] { make(amdgcnTestArtifact(hsaco_, chip_), options); }),
             "gpu.kiln: no AMD GPU 99 (this machine has ");
}

} // namespace
} // namespace kiln
