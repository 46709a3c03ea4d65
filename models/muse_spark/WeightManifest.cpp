// The checkpoint tensor list of model card section 3, in BF16 or NVFP4 form.
#include "models/muse_spark/WeightManifest.h"

#include <utility>

namespace kiln::muse_spark {
namespace {

// Appends tensors to a manifest; names are built as prefix + suffix.
class ManifestBuilder {
public:
  explicit ManifestBuilder(std::vector<TensorSpec> &out) : out(out) {}

  void add(std::string name, std::vector<int64_t> shape, DType dtype, WeightPart part,
           int64_t layer, int64_t expert, int64_t parameters) {
    TensorSpec &spec = out.emplace_back();
    spec.name = std::move(name);
    spec.shape = std::move(shape);
    spec.dtype = dtype;
    spec.part = part;
    spec.layer = layer;
    spec.expert = expert;
    spec.parameters = parameters;
  }

  // A BF16 tensor: every element is a parameter.
  void bf16(std::string name, std::vector<int64_t> shape, WeightPart part, int64_t layer = -1,
            int64_t expert = -1) {
    int64_t elements = 1;
    for (int64_t dim : shape)
      elements *= dim;
    add(std::move(name), std::move(shape), DType::BF16, part, layer, expert, elements);
  }

  // One NVFP4 linear weight [out, in] (ModelOpt layout): packed E2M1 pairs,
  // an E4M3 scale per 16 input elements, a global scale and an input scale.
  void nvfp4(const std::string &base, int64_t outDim, int64_t inDim, WeightPart part, int64_t layer,
             int64_t expert) {
    add(base + ".weight", {outDim, inDim / 2}, DType::U8, part, layer, expert, outDim * inDim);
    add(base + ".weight_scale", {outDim, inDim / 16}, DType::F8_E4M3, part, layer, expert, 0);
    add(base + ".weight_scale_2", {}, DType::F32, part, layer, expert, 0);
    add(base + ".input_scale", {}, DType::F32, part, layer, expert, 0);
  }

private:
  std::vector<TensorSpec> &out;
};

bool quantizedExperts(const Config &config, WeightFormat format, int64_t layer) {
  return format == WeightFormat::NVFP4 && layer > 0 && layer < config.numHiddenLayers - 1;
}

} // namespace

const char *weightPartName(WeightPart part) {
  switch (part) {
  case WeightPart::Embedding:
    return "embedding";
  case WeightPart::Head:
    return "head";
  case WeightPart::Attention:
    return "attention";
  case WeightPart::Router:
    return "router";
  case WeightPart::Latent:
    return "latent";
  case WeightPart::Experts:
    return "experts";
  case WeightPart::Norms:
    return "norms";
  }
  return "unknown";
}

std::string layerPrefix(int64_t layer) { return "model.layers." + std::to_string(layer) + "."; }

std::string expertPrefix(int64_t layer, int64_t expert) {
  return layerPrefix(layer) + "mlp.experts." + std::to_string(expert) + ".";
}

std::vector<TensorSpec> checkpointManifest(const Config &config, WeightFormat format) {
  const int64_t vocab = config.vocabSize;
  const int64_t hidden = config.hiddenSize;
  const int64_t layers = config.numHiddenLayers;
  const int64_t experts = config.numExperts;
  const int64_t latent = config.moeLatentSize;
  const int64_t inter = config.moeIntermediateSize;
  const int64_t headDim = config.headDim;

  if (format == WeightFormat::NVFP4 && (latent % 16 != 0 || inter % 16 != 0))
    throw ConfigError((config.name.empty() ? "checkpointManifest" : config.name) +
                      ": NVFP4 experts need moe_latent_size and "
                      "moe_intermediate_size to be multiples of 16");

  // Exact count, so the vector never reallocates.
  const int64_t perLayerFixed = 16;
  int64_t count = 3 + layers * perLayerFixed;
  for (int64_t layer = 0; layer < layers; ++layer)
    count += experts * (quantizedExperts(config, format, layer) ? 13 : 4);

  std::vector<TensorSpec> manifest;
  manifest.reserve(static_cast<size_t>(count));
  ManifestBuilder add(manifest);

  add.bf16("model.embed_tokens.weight", {vocab, hidden}, WeightPart::Embedding);

  for (int64_t layer = 0; layer < layers; ++layer) {
    const std::string p = layerPrefix(layer);
    add.bf16(p + "input_layernorm.weight", {hidden}, WeightPart::Norms, layer);
    add.bf16(p + "self_attn.q_proj.weight", {config.qWidth(), hidden}, WeightPart::Attention,
             layer);
    add.bf16(p + "self_attn.k_proj.weight", {config.kvWidth(), hidden}, WeightPart::Attention,
             layer);
    add.bf16(p + "self_attn.v_proj.weight", {config.kvWidth(), hidden}, WeightPart::Attention,
             layer);
    add.bf16(p + "self_attn.o_proj.weight", {hidden, config.qWidth()}, WeightPart::Attention,
             layer);
    add.bf16(p + "self_attn.q_norm.weight", {headDim}, WeightPart::Attention, layer);
    add.bf16(p + "self_attn.k_norm.weight", {headDim}, WeightPart::Attention, layer);
    add.bf16(p + "post_attention_layernorm.weight", {hidden}, WeightPart::Norms, layer);
    add.bf16(p + "attn_residual_gate", {hidden}, WeightPart::Norms, layer);
    add.bf16(p + "pre_feedforward_layernorm.weight", {hidden}, WeightPart::Norms, layer);
    add.bf16(p + "mlp.router.weight", {experts, hidden}, WeightPart::Router, layer);
    add.bf16(p + "mlp.pooler.weight", {latent, hidden}, WeightPart::Latent, layer);
    add.bf16(p + "mlp.expert_input_norm.weight", {latent}, WeightPart::Latent, layer);

    const bool quantized = quantizedExperts(config, format, layer);
    const std::string expertsBase = p + "mlp.experts.";
    for (int64_t expert = 0; expert < experts; ++expert) {
      const std::string e = expertsBase + std::to_string(expert) + ".";
      if (quantized) {
        add.nvfp4(e + "gate_proj", inter, latent, WeightPart::Experts, layer, expert);
        add.nvfp4(e + "up_proj", inter, latent, WeightPart::Experts, layer, expert);
        add.nvfp4(e + "down_proj", latent, inter, WeightPart::Experts, layer, expert);
      } else {
        add.bf16(e + "gate_proj.weight", {inter, latent}, WeightPart::Experts, layer, expert);
        add.bf16(e + "up_proj.weight", {inter, latent}, WeightPart::Experts, layer, expert);
        add.bf16(e + "down_proj.weight", {latent, inter}, WeightPart::Experts, layer, expert);
      }
      add.bf16(e + "post_norm.weight", {latent}, WeightPart::Experts, layer, expert);
    }

    add.bf16(p + "mlp.unpooler.weight", {hidden, latent}, WeightPart::Latent, layer);
    add.bf16(p + "post_feedforward_layernorm.weight", {hidden}, WeightPart::Norms, layer);
    add.bf16(p + "mlp_residual_gate", {hidden}, WeightPart::Norms, layer);
  }

  add.bf16("model.norm.weight", {hidden}, WeightPart::Norms);
  add.bf16("lm_head.weight", {vocab, hidden}, WeightPart::Head);
  return manifest;
}

} // namespace kiln::muse_spark
