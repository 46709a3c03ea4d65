// Synthetic checkpoints: layout, determinism, the checker, BF16/NVFP4
// agreement and the conditioning of the synthetic weights.
#include "models/muse_spark/CheckpointSynth.h"
#include "models/muse_spark/SyntheticWeights.h"
#include "models/muse_spark/WeightManifest.h"
#include "runtime/core/Float.h"
#include "runtime/quant/Nvfp4.h"
#include "runtime/safetensors/Checkpoint.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace kiln::muse_spark {
namespace {

namespace fs = std::filesystem;

// Small enough that muse-spark-tiny (~7-9 MB) needs several shards.
constexpr uint64_t kShardBytes = 1 << 20;

std::string readAll(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// File name -> contents of every file in a directory.
std::map<std::string, std::string> dirContents(const std::string &dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry &entry : fs::directory_iterator(dir))
    files[entry.path().filename().string()] = readAll(entry.path());
  return files;
}

std::vector<float> bf16Values(ByteView bytes) {
  std::vector<float> values(bytes.size / 2);
  for (size_t i = 0; i < values.size(); ++i)
    values[i] =
        bf16ToFloat(static_cast<uint16_t>(bytes.data[2 * i] | (bytes.data[2 * i + 1] << 8)));
  return values;
}

float f32Value(ByteView bytes) {
  float value;
  std::memcpy(&value, bytes.data, sizeof(value));
  return value;
}

bool hasProblemContaining(const CheckpointCheck &check, const std::string &part) {
  for (const std::string &problem : check.problems)
    if (problem.find(part) != std::string::npos)
      return true;
  return false;
}

std::string joinProblems(const CheckpointCheck &check) {
  std::string text;
  for (size_t i = 0; i < check.problems.size() && i < 10; ++i)
    text += check.problems[i] + "\n";
  return text;
}

class CheckpointSynthTest : public ::testing::TestWithParam<WeightFormat> {
protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/kiln-ckpt-synth-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    root = pattern;
    config = loadConfig("muse-spark-tiny");
  }
  void TearDown() override {
    std::error_code error;
    fs::remove_all(root, error);
  }

  std::string write(const std::string &name, uint64_t seed, WeightFormat format) {
    const std::string dir = root + "/" + name;
    writeSyntheticCheckpoint(config, format, seed, dir, kShardBytes);
    return dir;
  }
  std::string write(const std::string &name, uint64_t seed) {
    return write(name, seed, GetParam());
  }

  std::string root;
  Config config;
};

TEST_P(CheckpointSynthTest, ShardedCheckpointHoldsTheManifest) {
  const std::string dir = write("a", 11);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  EXPECT_TRUE(checkpoint.isSharded());
  EXPECT_GT(checkpoint.files().size(), 2u);

  const std::vector<TensorSpec> manifest = checkpointManifest(config, GetParam());
  EXPECT_EQ(checkpoint.numTensors(), manifest.size());
  for (const TensorSpec &spec : manifest) {
    const CheckpointTensor tensor = checkpoint.find(spec.name);
    ASSERT_TRUE(tensor) << spec.name;
    EXPECT_EQ(tensor.info->dtype, spec.dtype) << spec.name;
    EXPECT_EQ(tensor.info->shape, spec.shape) << spec.name;
  }

  // config.json reads back as the same model, quantised iff NVFP4.
  const Config stored = loadConfig(dir + "/config.json");
  EXPECT_EQ(stored.hiddenSize, config.hiddenSize);
  EXPECT_EQ(stored.numExperts, config.numExperts);
  EXPECT_EQ(stored.quantization.has_value(), GetParam() == WeightFormat::NVFP4);
  if (stored.quantization) {
    const std::vector<std::string> &excluded = stored.quantization->excludeModules;
    for (const char *module :
         {"lm_head", "model.layers.0.mlp.experts.*", "model.layers.3.mlp.experts.*"})
      EXPECT_NE(std::find(excluded.begin(), excluded.end(), module), excluded.end()) << module;
  }
}

TEST_P(CheckpointSynthTest, NoTensorHoldsNanOrInf) {
  const Checkpoint checkpoint = Checkpoint::open(write("a", 5));
  for (const SafetensorsFile &file : checkpoint.files()) {
    for (const TensorInfo &info : file.tensors()) {
      const ByteView bytes = file.bytes(info);
      if (info.dtype == DType::BF16) {
        for (float v : bf16Values(bytes))
          ASSERT_TRUE(std::isfinite(v)) << info.name;
      } else if (info.dtype == DType::F32) {
        const float v = f32Value(bytes);
        EXPECT_TRUE(std::isfinite(v) && v > 0) << info.name << " = " << v;
      } else if (info.dtype == DType::F8_E4M3) {
        for (uint8_t code : bytes)
          ASSERT_NE(code & 0x7f, 0x7f) << info.name;
      }
    }
  }
}

TEST_P(CheckpointSynthTest, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto first = dirContents(write("a", 42));
  const auto second = dirContents(write("b", 42));
  const auto other = dirContents(write("c", 43));
  ASSERT_GT(first.size(), 3u);
  ASSERT_EQ(first.size(), second.size());
  for (const auto &[name, bytes] : first) {
    auto it = second.find(name);
    ASSERT_NE(it, second.end()) << name;
    EXPECT_TRUE(it->second == bytes) << name << " differs";
  }
  // Same layout, different values: every shard changes, config.json not.
  ASSERT_EQ(other.size(), first.size());
  for (const auto &[name, bytes] : first) {
    if (name.rfind("model-", 0) == 0)
      EXPECT_FALSE(other.at(name) == bytes) << name << " did not change";
  }
  EXPECT_EQ(other.at("config.json"), first.at("config.json"));
}

TEST_P(CheckpointSynthTest, RewritingRemovesStaleShards) {
  const std::string dir = root + "/r";
  writeSyntheticCheckpoint(config, GetParam(), 1, dir, kShardBytes / 4);
  writeSyntheticCheckpoint(config, GetParam(), 1, dir, kShardBytes);
  const auto rewritten = dirContents(dir);
  const auto fresh = dirContents(write("fresh", 1));
  EXPECT_EQ(rewritten.size(), fresh.size());
  EXPECT_TRUE(rewritten == fresh);
}

TEST_P(CheckpointSynthTest, SynthesizeTensorMatchesCheckpointInAnyOrder) {
  const Checkpoint checkpoint = Checkpoint::open(write("a", 9));
  std::vector<TensorSpec> manifest = checkpointManifest(config, GetParam());
  // Reverse order defeats any cache that assumes manifest order.
  std::reverse(manifest.begin(), manifest.end());
  for (const TensorSpec &spec : manifest) {
    const CheckpointTensor tensor = checkpoint.find(spec.name);
    ASSERT_TRUE(tensor);
    std::vector<uint8_t> bytes(tensor.bytes.size);
    synthesizeTensor(config, spec, 9, bytes.data());
    ASSERT_TRUE(std::equal(bytes.begin(), bytes.end(), tensor.bytes.begin())) << spec.name;
  }
}

TEST_P(CheckpointSynthTest, CheckAcceptsRightConfigAndReportsProblems) {
  const std::string dir = write("a", 3);
  const CheckpointCheck good = checkCheckpoint(dir, &config);
  EXPECT_TRUE(good.ok()) << joinProblems(good);
  EXPECT_EQ(good.numTensors, checkpointManifest(config, GetParam()).size());
  EXPECT_EQ(good.format, GetParam());
  EXPECT_EQ(good.totalBytes, Checkpoint::open(dir).totalBytes());
  EXPECT_TRUE(checkCheckpoint(dir).ok());

  // A single shard file opens on its own and matches no full manifest.
  const std::string shard = dir + "/" + shardFileName(1, Checkpoint::open(dir).files().size());
  const CheckpointCheck partial = checkCheckpoint(shard, &config);
  EXPECT_TRUE(hasProblemContaining(partial, "missing tensor \"lm_head.weight\""))
      << joinProblems(partial);

  const Config small = loadConfig("muse-spark-small");
  const CheckpointCheck wrong = checkCheckpoint(dir, &small);
  EXPECT_FALSE(wrong.ok());
  EXPECT_TRUE(hasProblemContaining(wrong,
                                   "tensor \"model.embed_tokens.weight\": expected BF16 [32000, "
                                   "2048], got BF16 [1024, 256]"))
      << joinProblems(wrong);
  EXPECT_TRUE(hasProblemContaining(wrong, "missing tensor \"model.layers.7.mlp.router.weight\""));
  EXPECT_TRUE(hasProblemContaining(wrong, "\"hidden_size\" is 256"));

  const CheckpointCheck absent = checkCheckpoint(root + "/nowhere", &config);
  EXPECT_FALSE(absent.ok());
  EXPECT_TRUE(hasProblemContaining(absent, "nowhere"));
}

TEST_P(CheckpointSynthTest, CheckReportsMissingRenamedAndReshapedTensors) {
  std::vector<TensorSpec> manifest = checkpointManifest(config, GetParam());
  const bool nvfp4 = GetParam() == WeightFormat::NVFP4;
  const std::string dropped = nvfp4 ? "model.layers.1.mlp.experts.3.up_proj.weight_scale"
                                    : "model.layers.1.mlp.experts.3.up_proj.weight";
  const std::string renamed = "model.layers.2.self_attn.q_norm.weight";
  const std::string reshaped = "model.layers.0.mlp.router.weight";

  std::vector<TensorDecl> decls;
  std::vector<const TensorSpec *> sources;
  for (const TensorSpec &spec : manifest) {
    if (spec.name == dropped)
      continue;
    TensorDecl decl{spec.name, spec.dtype, spec.shape};
    if (spec.name == renamed)
      decl.name = "model.layers.2.self_attn.q_nrom.weight";
    if (spec.name == reshaped)
      decl.shape = {spec.shape[0] / 2, spec.shape[1]};
    decls.push_back(decl);
    sources.push_back(&spec);
  }
  const std::string dir = root + "/broken";
  writeShardedCheckpoint(
      dir, decls,
      [&](size_t index, uint8_t *dst) {
        TensorSpec spec = *sources[index];
        spec.shape = decls[index].shape;
        synthesizeTensor(config, spec, 1, dst);
      },
      kShardBytes);

  const CheckpointCheck check = checkCheckpoint(dir, &config);
  EXPECT_EQ(check.format, GetParam());
  EXPECT_EQ(check.problems.size(), 4u) << joinProblems(check);
  EXPECT_TRUE(hasProblemContaining(check, "missing tensor \"" + dropped + "\""));
  EXPECT_TRUE(hasProblemContaining(check, "missing tensor \"" + renamed + "\""));
  EXPECT_TRUE(
      hasProblemContaining(check, "unexpected tensor \"model.layers.2.self_attn.q_nrom.weight\""));
  EXPECT_TRUE(hasProblemContaining(check, "tensor \"" + reshaped +
                                              "\": expected BF16 [16, 256], got BF16 "
                                              "[8, 256]"));
}

INSTANTIATE_TEST_SUITE_P(Formats, CheckpointSynthTest,
                         ::testing::Values(WeightFormat::BF16, WeightFormat::NVFP4),
                         [](const auto &info) {
                           return info.param == WeightFormat::BF16 ? std::string("BF16")
                                                                   : std::string("NVFP4");
                         });

class CheckpointFormatsTest : public CheckpointSynthTest {};

TEST_F(CheckpointFormatsTest, Nvfp4ExpertsApproximateBf16Experts) {
  const Checkpoint bf16 = Checkpoint::open(write("bf16", 21, WeightFormat::BF16));
  const Checkpoint nvfp4 = Checkpoint::open(write("nvfp4", 21, WeightFormat::NVFP4));
  size_t compared = 0;
  for (const TensorSpec &spec : checkpointManifest(config, WeightFormat::NVFP4)) {
    if (spec.dtype != DType::U8) {
      // Everything that is not quantised is byte-identical.
      if (spec.dtype == DType::BF16) {
        EXPECT_TRUE(std::equal(nvfp4.find(spec.name).bytes.begin(),
                               nvfp4.find(spec.name).bytes.end(),
                               bf16.find(spec.name).bytes.begin()))
            << spec.name;
      }
      continue;
    }
    const std::string base = syntheticStreamName(spec.name);
    const int64_t rows = spec.shape[0], cols = spec.shape[1] * 2;
    std::vector<float> dequantized(rows * cols);
    dequantizeNvfp4(nvfp4.find(spec.name).bytes.data, nvfp4.find(base + ".weight_scale").bytes.data,
                    f32Value(nvfp4.find(base + ".weight_scale_2").bytes), rows, cols,
                    dequantized.data());
    const std::vector<float> reference = bf16Values(bf16.find(base + ".weight").bytes);
    ASSERT_EQ(reference.size(), dequantized.size());
    double errSq = 0, sigSq = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      errSq += std::pow(double(reference[i]) - dequantized[i], 2);
      sigSq += std::pow(double(reference[i]), 2);
    }
    EXPECT_LT(std::sqrt(errSq / sigSq), 0.1) << base;
    ++compared;
  }
  // Layers 1 and 2 of tiny: 16 experts x 3 projections each.
  EXPECT_EQ(compared, 2u * 16 * 3);
}

TEST_F(CheckpointFormatsTest, WeightsKeepActivationsConditioned) {
  const Checkpoint checkpoint = Checkpoint::open(write("bf16", 4, WeightFormat::BF16));
  std::mt19937 rng(99);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t hidden = config.hiddenSize;
  const int64_t experts = config.numExperts;
  const int64_t topK = config.numExpertsPerTok;
  const int kInputs = 256;

  for (int64_t layer = 0; layer < config.numHiddenLayers; ++layer) {
    const std::string p = layerPrefix(layer);
    // Router: softmax over E experts of RMS-1 inputs is neither uniform nor
    // one-hot.
    const std::vector<float> router = bf16Values(checkpoint.find(p + "mlp.router.weight").bytes);
    double top1Sum = 0, topKSum = 0;
    for (int n = 0; n < kInputs; ++n) {
      std::vector<double> u(hidden), logits(experts);
      for (double &x : u)
        x = normal(rng);
      for (int64_t e = 0; e < experts; ++e)
        for (int64_t h = 0; h < hidden; ++h)
          logits[e] += router[e * hidden + h] * u[h];
      const double peak = *std::max_element(logits.begin(), logits.end());
      double total = 0;
      for (double &l : logits)
        total += (l = std::exp(l - peak));
      std::sort(logits.begin(), logits.end(), std::greater<double>());
      top1Sum += logits[0] / total;
      for (int64_t k = 0; k < topK; ++k)
        topKSum += logits[k] / total;
    }
    const double top1 = top1Sum / kInputs, topK = topKSum / kInputs;
    EXPECT_GT(top1, 0.08) << "layer " << layer;
    EXPECT_LT(top1, 0.9) << "layer " << layer;
    EXPECT_LT(topK, 0.98) << "layer " << layer;

    // A projection maps RMS-1 inputs to RMS ~1 outputs.
    const std::vector<float> wq = bf16Values(checkpoint.find(p + "self_attn.q_proj.weight").bytes);
    const int64_t qWidth = config.qWidth();
    double outSq = 0;
    for (int n = 0; n < 16; ++n) {
      std::vector<double> u(hidden);
      for (double &x : u)
        x = normal(rng);
      for (int64_t o = 0; o < qWidth; ++o) {
        double acc = 0;
        for (int64_t h = 0; h < hidden; ++h)
          acc += wq[o * hidden + h] * u[h];
        outSq += acc * acc;
      }
    }
    const double rms = std::sqrt(outSq / (16.0 * qWidth));
    EXPECT_GT(rms, 0.8) << "layer " << layer;
    EXPECT_LT(rms, 1.25) << "layer " << layer;

    // Norm weights near 1, residual gates in (0.2, 0.7).
    for (float v : bf16Values(checkpoint.find(p + "input_layernorm.weight").bytes)) {
      EXPECT_GT(v, 0.7f);
      EXPECT_LT(v, 1.3f);
    }
    for (float v : bf16Values(checkpoint.find(p + "mlp_residual_gate").bytes)) {
      EXPECT_GT(v, 0.2f);
      EXPECT_LT(v, 0.7f);
    }
  }
}

TEST(SyntheticWeightsTest, NormalStreamHasUnitMoments) {
  double sum = 0, sumSq = 0;
  const int count = 200000;
  for (int i = 0; i < count; ++i) {
    const double z = syntheticNormal("some.module", 1, i);
    sum += z;
    sumSq += z * z;
  }
  EXPECT_NEAR(sum / count, 0.0, 0.01);
  EXPECT_NEAR(sumSq / count, 1.0, 0.02);
  EXPECT_NE(syntheticNormal("some.module", 1, 0), syntheticNormal("some.module", 2, 0));
  EXPECT_NE(syntheticNormal("some.module", 1, 0), syntheticNormal("other.module", 1, 0));
  EXPECT_EQ(syntheticStreamName("a.b.gate_proj.weight_scale_2"), "a.b.gate_proj");
  EXPECT_EQ(syntheticStreamName("a.b.gate_proj.weight"), "a.b.gate_proj");
  EXPECT_EQ(syntheticStreamName("a.mlp_residual_gate"), "a.mlp_residual_gate");
}

} // namespace
} // namespace kiln::muse_spark
