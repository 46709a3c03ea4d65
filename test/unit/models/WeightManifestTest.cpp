// The checkpoint manifest against the model card (section 3) and its
// parameter budget (section 1).
#include "models/muse_spark/WeightManifest.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <unordered_map>
#include <unordered_set>

namespace kiln::muse_spark {
namespace {

std::map<WeightPart, int64_t> parametersByPart(const std::vector<TensorSpec> &manifest) {
  std::map<WeightPart, int64_t> total;
  for (const TensorSpec &spec : manifest)
    total[spec.part] += spec.parameters;
  return total;
}

int64_t totalParameters(const std::vector<TensorSpec> &manifest) {
  int64_t total = 0;
  for (const TensorSpec &spec : manifest)
    total += spec.parameters;
  return total;
}

std::unordered_map<std::string, const TensorSpec *>
byName(const std::vector<TensorSpec> &manifest) {
  std::unordered_map<std::string, const TensorSpec *> map;
  map.reserve(manifest.size());
  for (const TensorSpec &spec : manifest)
    map.emplace(spec.name, &spec);
  return map;
}

using Shape = std::vector<int64_t>;

TEST(WeightManifest, PartNamesAndPrefixes) {
  EXPECT_STREQ(weightPartName(WeightPart::Embedding), "embedding");
  EXPECT_STREQ(weightPartName(WeightPart::Head), "head");
  EXPECT_STREQ(weightPartName(WeightPart::Attention), "attention");
  EXPECT_STREQ(weightPartName(WeightPart::Router), "router");
  EXPECT_STREQ(weightPartName(WeightPart::Latent), "latent");
  EXPECT_STREQ(weightPartName(WeightPart::Experts), "experts");
  EXPECT_STREQ(weightPartName(WeightPart::Norms), "norms");
  EXPECT_EQ(layerPrefix(3), "model.layers.3.");
  EXPECT_EQ(expertPrefix(3, 7), "model.layers.3.mlp.experts.7.");
}

TEST(WeightManifest, FullModelParameterBudget) {
  Config c = loadConfig("muse-spark-open-816b-a42b");
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::BF16);
  std::map<WeightPart, int64_t> parts = parametersByPart(manifest);

  const int64_t L = 62;
  // Expert projections: 256 x 3 x 4096 x 4096 x 62 = 799B, plus the
  // per-expert post_norm weights (256 x 4096 per layer).
  const int64_t expertProjections = int64_t(256) * 3 * 4096 * 4096 * L;
  EXPECT_EQ(expertProjections, 798863917056);
  EXPECT_EQ(parts[WeightPart::Experts], expertProjections + int64_t(256) * 4096 * L);
  // Attention: q, k, v, o and the q/k norms; 13.5B over 62 layers.
  const int64_t attention =
      ((12288 + 1024 + 1024) * int64_t(8192) + 8192 * int64_t(12288) + 2 * 128) * L;
  EXPECT_EQ(parts[WeightPart::Attention], attention);
  EXPECT_NEAR(attention / 1e9, 13.5, 0.05);
  // Latent projections: pooler, unpooler, expert_input_norm; 4.2B.
  const int64_t latent = (2 * int64_t(4096) * 8192 + 4096) * L;
  EXPECT_EQ(parts[WeightPart::Latent], latent);
  EXPECT_NEAR(latent / 1e9, 4.16, 0.01);
  // Embedding + head: 3.3B.
  EXPECT_EQ(parts[WeightPart::Embedding], int64_t(202048) * 8192);
  EXPECT_EQ(parts[WeightPart::Head], int64_t(202048) * 8192);
  EXPECT_NEAR(2 * int64_t(202048) * 8192 / 1e9, 3.31, 0.01);
  EXPECT_EQ(parts[WeightPart::Router], int64_t(256) * 8192 * L);
  EXPECT_EQ(parts[WeightPart::Norms], (6 * int64_t(8192)) * L + 8192);

  // The parts sum to ~820B (799 + 13.5 + 4.2 + 3.3 + router and norms); the
  // "816B" in the model's name is the announced round figure.
  int64_t sum = 0;
  for (const auto &[part, parameters] : parts)
    sum += parameters;
  EXPECT_EQ(totalParameters(manifest), sum);
  EXPECT_NEAR(sum / 1e9, 820.06, 0.01);
}

TEST(WeightManifest, FullModelTensorCountsAndOrder) {
  Config c = loadConfig("muse-spark-open-816b-a42b");
  std::vector<TensorSpec> bf16 = checkpointManifest(c, WeightFormat::BF16);
  EXPECT_EQ(bf16.size(), size_t(3 + 62 * (16 + 256 * 4)));
  std::vector<TensorSpec> fp4 = checkpointManifest(c, WeightFormat::NVFP4);
  EXPECT_EQ(fp4.size(), size_t(3 + 62 * 16 + 2 * 256 * 4 + 60 * 256 * 13));
  EXPECT_EQ(bf16.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(bf16[bf16.size() - 2].name, "model.norm.weight");
  EXPECT_EQ(bf16.back().name, "lm_head.weight");
  EXPECT_EQ(totalParameters(bf16), totalParameters(fp4));
}

TEST(WeightManifest, LayerOrderMatchesTheHeader) {
  Config c = loadConfig("muse-spark-tiny");
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::BF16);
  std::vector<std::string> layer1;
  for (const TensorSpec &spec : manifest)
    if (spec.layer == 1)
      layer1.push_back(spec.name);
  std::vector<std::string> expected;
  const std::string p = "model.layers.1.";
  for (const char *suffix :
       {"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
        "self_attn.v_proj.weight", "self_attn.o_proj.weight", "self_attn.q_norm.weight",
        "self_attn.k_norm.weight", "post_attention_layernorm.weight", "attn_residual_gate",
        "pre_feedforward_layernorm.weight", "mlp.router.weight", "mlp.pooler.weight",
        "mlp.expert_input_norm.weight"})
    expected.push_back(p + suffix);
  for (int e = 0; e < 16; ++e)
    for (const char *suffix :
         {"gate_proj.weight", "up_proj.weight", "down_proj.weight", "post_norm.weight"})
      expected.push_back(expertPrefix(1, e) + suffix);
  for (const char *suffix :
       {"mlp.unpooler.weight", "post_feedforward_layernorm.weight", "mlp_residual_gate"})
    expected.push_back(p + suffix);
  EXPECT_EQ(layer1, expected);

  // Layers are contiguous and ascending.
  int64_t last = -1;
  for (size_t i = 1; i + 2 < manifest.size(); ++i) {
    EXPECT_GE(manifest[i].layer, last) << manifest[i].name;
    last = manifest[i].layer;
  }
  EXPECT_EQ(manifest.front().layer, -1);
  EXPECT_EQ(manifest.back().layer, -1);
}

TEST(WeightManifest, TinyBf16ShapesPartsAndDtypes) {
  Config c = loadConfig("muse-spark-tiny");
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::BF16);
  auto map = byName(manifest);
  auto expectSpec = [&](const std::string &name, Shape shape, WeightPart part, int64_t layer,
                        int64_t expert) {
    auto it = map.find(name);
    ASSERT_NE(it, map.end()) << name;
    EXPECT_EQ(it->second->shape, shape) << name;
    EXPECT_EQ(it->second->dtype, DType::BF16) << name;
    EXPECT_EQ(it->second->part, part) << name;
    EXPECT_EQ(it->second->layer, layer) << name;
    EXPECT_EQ(it->second->expert, expert) << name;
  };
  expectSpec("model.embed_tokens.weight", {1024, 256}, WeightPart::Embedding, -1, -1);
  expectSpec("lm_head.weight", {1024, 256}, WeightPart::Head, -1, -1);
  expectSpec("model.norm.weight", {256}, WeightPart::Norms, -1, -1);
  const std::string p = "model.layers.2.";
  expectSpec(p + "input_layernorm.weight", {256}, WeightPart::Norms, 2, -1);
  expectSpec(p + "self_attn.q_proj.weight", {192, 256}, WeightPart::Attention, 2, -1);
  expectSpec(p + "self_attn.k_proj.weight", {64, 256}, WeightPart::Attention, 2, -1);
  expectSpec(p + "self_attn.v_proj.weight", {64, 256}, WeightPart::Attention, 2, -1);
  expectSpec(p + "self_attn.o_proj.weight", {256, 192}, WeightPart::Attention, 2, -1);
  expectSpec(p + "self_attn.q_norm.weight", {32}, WeightPart::Attention, 2, -1);
  expectSpec(p + "self_attn.k_norm.weight", {32}, WeightPart::Attention, 2, -1);
  expectSpec(p + "post_attention_layernorm.weight", {256}, WeightPart::Norms, 2, -1);
  expectSpec(p + "attn_residual_gate", {256}, WeightPart::Norms, 2, -1);
  expectSpec(p + "pre_feedforward_layernorm.weight", {256}, WeightPart::Norms, 2, -1);
  expectSpec(p + "mlp.router.weight", {16, 256}, WeightPart::Router, 2, -1);
  expectSpec(p + "mlp.pooler.weight", {128, 256}, WeightPart::Latent, 2, -1);
  expectSpec(p + "mlp.expert_input_norm.weight", {128}, WeightPart::Latent, 2, -1);
  expectSpec(p + "mlp.experts.15.gate_proj.weight", {128, 128}, WeightPart::Experts, 2, 15);
  expectSpec(p + "mlp.experts.15.up_proj.weight", {128, 128}, WeightPart::Experts, 2, 15);
  expectSpec(p + "mlp.experts.15.down_proj.weight", {128, 128}, WeightPart::Experts, 2, 15);
  expectSpec(p + "mlp.experts.15.post_norm.weight", {128}, WeightPart::Experts, 2, 15);
  expectSpec(p + "mlp.unpooler.weight", {256, 128}, WeightPart::Latent, 2, -1);
  expectSpec(p + "post_feedforward_layernorm.weight", {256}, WeightPart::Norms, 2, -1);
  expectSpec(p + "mlp_residual_gate", {256}, WeightPart::Norms, 2, -1);
  for (const TensorSpec &spec : manifest) {
    EXPECT_EQ(spec.dtype, DType::BF16) << spec.name;
    int64_t elements = 1;
    for (int64_t d : spec.shape)
      elements *= d;
    EXPECT_EQ(spec.parameters, elements) << spec.name;
  }
}

TEST(WeightManifest, GateUpAndDownShapesDifferWhenLatentIsNotIntermediate) {
  Config c = loadConfig("muse-spark-tiny");
  c.moeIntermediateSize = 192;
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::NVFP4);
  auto map = byName(manifest);
  EXPECT_EQ(map.at("model.layers.0.mlp.experts.0.gate_proj.weight")->shape, (Shape{192, 128}));
  EXPECT_EQ(map.at("model.layers.0.mlp.experts.0.down_proj.weight")->shape, (Shape{128, 192}));
  EXPECT_EQ(map.at("model.layers.1.mlp.experts.0.up_proj.weight")->shape, (Shape{192, 64}));
  EXPECT_EQ(map.at("model.layers.1.mlp.experts.0.up_proj.weight_scale")->shape, (Shape{192, 8}));
  EXPECT_EQ(map.at("model.layers.1.mlp.experts.0.down_proj.weight")->shape, (Shape{128, 96}));
  EXPECT_EQ(map.at("model.layers.1.mlp.experts.0.down_proj.weight_scale")->shape, (Shape{128, 12}));
}

TEST(WeightManifest, TinyNvfp4QuantisesOnlyInnerLayerExperts) {
  Config c = loadConfig("muse-spark-tiny");
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::NVFP4);
  auto map = byName(manifest);

  for (const TensorSpec &spec : manifest) {
    if (spec.dtype == DType::BF16)
      continue;
    // Every non-BF16 tensor is an expert projection of layers 1..2.
    EXPECT_TRUE(spec.layer == 1 || spec.layer == 2) << spec.name;
    EXPECT_EQ(spec.part, WeightPart::Experts) << spec.name;
    EXPECT_GE(spec.expert, 0) << spec.name;
    EXPECT_TRUE(spec.dtype == DType::U8 || spec.dtype == DType::F8_E4M3 || spec.dtype == DType::F32)
        << spec.name;
  }

  for (int64_t layer : {1, 2}) {
    for (int64_t e = 0; e < 16; ++e) {
      for (const char *proj : {"gate_proj", "up_proj", "down_proj"}) {
        std::string base = expertPrefix(layer, e) + proj;
        ASSERT_TRUE(map.count(base + ".weight")) << base;
        const TensorSpec &w = *map.at(base + ".weight");
        EXPECT_EQ(w.dtype, DType::U8);
        EXPECT_EQ(w.shape, (Shape{128, 64}));
        EXPECT_EQ(w.parameters, 128 * 128);
        const TensorSpec &s = *map.at(base + ".weight_scale");
        EXPECT_EQ(s.dtype, DType::F8_E4M3);
        EXPECT_EQ(s.shape, (Shape{128, 8}));
        EXPECT_EQ(s.parameters, 0);
        const TensorSpec &s2 = *map.at(base + ".weight_scale_2");
        EXPECT_EQ(s2.dtype, DType::F32);
        EXPECT_TRUE(s2.shape.empty());
        EXPECT_EQ(s2.parameters, 0);
        const TensorSpec &in = *map.at(base + ".input_scale");
        EXPECT_EQ(in.dtype, DType::F32);
        EXPECT_TRUE(in.shape.empty());
        EXPECT_EQ(in.parameters, 0);
        // The four tensors are adjacent, in this order.
        EXPECT_EQ(&s, &w + 1);
        EXPECT_EQ(&s2, &w + 2);
        EXPECT_EQ(&in, &w + 3);
      }
      const TensorSpec &norm = *map.at(expertPrefix(layer, e) + "post_norm.weight");
      EXPECT_EQ(norm.dtype, DType::BF16);
      EXPECT_EQ(norm.shape, (Shape{128}));
    }
  }

  for (int64_t layer : {0, 3}) {
    for (int64_t e = 0; e < 16; ++e) {
      for (const char *proj : {"gate_proj", "up_proj", "down_proj"}) {
        std::string base = expertPrefix(layer, e) + proj;
        ASSERT_TRUE(map.count(base + ".weight")) << base;
        EXPECT_EQ(map.at(base + ".weight")->dtype, DType::BF16);
        EXPECT_EQ(map.at(base + ".weight")->shape, (Shape{128, 128}));
        EXPECT_FALSE(map.count(base + ".weight_scale")) << base;
        EXPECT_FALSE(map.count(base + ".input_scale")) << base;
      }
    }
  }
  EXPECT_EQ(map.at("model.layers.1.mlp.router.weight")->dtype, DType::BF16);
  EXPECT_EQ(map.at("model.layers.1.mlp.pooler.weight")->dtype, DType::BF16);
}

TEST(WeightManifest, Bf16AndNvfp4StoreTheSameParameters) {
  for (const std::string &name : builtinConfigNames()) {
    Config c = loadConfig(name);
    std::vector<TensorSpec> bf16 = checkpointManifest(c, WeightFormat::BF16);
    std::vector<TensorSpec> fp4 = checkpointManifest(c, WeightFormat::NVFP4);
    EXPECT_EQ(totalParameters(bf16), totalParameters(fp4)) << name;
    EXPECT_EQ(parametersByPart(bf16), parametersByPart(fp4)) << name;
  }
}

TEST(WeightManifest, NamesAreUnique) {
  for (const std::string &name : builtinConfigNames()) {
    Config c = loadConfig(name);
    for (WeightFormat format : {WeightFormat::BF16, WeightFormat::NVFP4}) {
      std::vector<TensorSpec> manifest = checkpointManifest(c, format);
      std::unordered_set<std::string> seen;
      seen.reserve(manifest.size());
      for (const TensorSpec &spec : manifest)
        EXPECT_TRUE(seen.insert(spec.name).second) << name << ": " << spec.name;
    }
  }
}

TEST(WeightManifest, FullNvfp4ManifestIsFast) {
  Config c = loadConfig("muse-spark-open-816b-a42b");
  auto start = std::chrono::steady_clock::now();
  std::vector<TensorSpec> manifest = checkpointManifest(c, WeightFormat::NVFP4);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(manifest.size(), 200000u);
  // Well under a second on an idle machine; generous for a loaded CI host.
  EXPECT_LT(seconds, 2.0);
}

} // namespace
} // namespace kiln::muse_spark
