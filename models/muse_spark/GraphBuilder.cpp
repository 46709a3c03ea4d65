// The Muse Spark forward pass as kiln graph IR, following the model card
// (sections 2 and 3) line by line. Checkpoint names come from the same
// helpers the checkpoint manifest uses.
#include "models/muse_spark/GraphBuilder.h"

#include "dialects/kiln/KilnOps.h"
#include "models/muse_spark/WeightManifest.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"

#include <cmath>
#include <string>

using namespace mlir;

namespace kiln::muse_spark {
namespace {

class ForwardBuilder {
public:
  ForwardBuilder(MLIRContext &context, const Config &config, const GraphOptions &options)
      : ctx(context), config(config), options(options), b(&context), act(b.getBF16Type()),
        tokens(options.tokens) {}

  OwningOpRef<ModuleOp> build();

private:
  // Every op is created at a location naming its checkpoint module.
  Location loc(const std::string &name) { return NameLoc::get(b.getStringAttr(name)); }

  RankedTensorType tensor(ArrayRef<int64_t> shape, Type elem) {
    return RankedTensorType::get(shape, elem);
  }
  RankedTensorType acts(int64_t width) { return tensor({tokens, width}, act); }

  Value weight(const std::string &name, ArrayRef<int64_t> shape, Type elem = {}) {
    return WeightOp::create(b, loc(name), tensor(shape, elem ? elem : act), name);
  }
  Value rmsNorm(Value x, const std::string &module) {
    int64_t width = llvm::cast<RankedTensorType>(x.getType()).getDimSize(1);
    Value w = weight(module + ".weight", {width});
    return RmsNormOp::create(b, loc(module), x.getType(), x, w,
                             b.getF64FloatAttr(config.rmsNormEps));
  }
  Value linear(Value x, const std::string &module, int64_t out, int64_t in, Type resultElem = {}) {
    Value w = weight(module + ".weight", {out, in});
    return LinearOp::create(b, loc(module), tensor({tokens, out}, resultElem ? resultElem : act), x,
                            w);
  }
  // out = residual + gate * RMSNorm(update; norm): one sandwich-norm half.
  Value gatedResidual(Value residual, Value update, const std::string &normModule,
                      const std::string &gateName) {
    Value normed = rmsNorm(update, normModule);
    Value gate = weight(gateName, {config.hiddenSize});
    Value gated = MulOp::create(b, loc(gateName), normed.getType(), normed, gate);
    return AddOp::create(b, loc(gateName), residual.getType(), residual, gated);
  }
  // A stacked expert projection [E, out, in], BF16 or NVFP4 (dequantised).
  Value expertProjection(int64_t layer, const std::string &proj, int64_t out, int64_t in);

  Value attention(Value x, Value positions, int64_t layer);
  Value latentMoE(Value u, int64_t layer);
  Value layer(Value x, Value positions, int64_t layer);

  MLIRContext &ctx;
  const Config &config;
  const GraphOptions &options;
  OpBuilder b;
  Type act;
  int64_t tokens;
};

Value ForwardBuilder::expertProjection(int64_t layer, const std::string &proj, int64_t out,
                                       int64_t in) {
  std::string module = layerPrefix(layer) + "mlp.experts.{e}." + proj;
  int64_t experts = config.numExperts;
  // NVFP4 checkpoints keep the experts of the first and last layer in BF16.
  bool quantized =
      options.format == WeightFormat::NVFP4 && layer > 0 && layer < config.numHiddenLayers - 1;
  if (!quantized)
    return weight(module + ".weight", {experts, out, in});
  Value packed = weight(module + ".weight", {experts, out, in / 2}, b.getIntegerType(8, false));
  Value scales =
      weight(module + ".weight_scale", {experts, out, in / 16}, b.getType<Float8E4M3FNType>());
  Value global = weight(module + ".weight_scale_2", {experts}, b.getF32Type());
  return Nvfp4DequantOp::create(b, loc(module), tensor({experts, out, in}, act), packed, scales,
                                global);
}

Value ForwardBuilder::attention(Value x, Value positions, int64_t layer) {
  std::string attn = layerPrefix(layer) + "self_attn.";
  int64_t hidden = config.hiddenSize, headDim = config.headDim;
  int64_t qHeads = config.numAttentionHeads, kvHeads = config.numKeyValueHeads;
  Value n = rmsNorm(x, layerPrefix(layer) + "input_layernorm");
  Value q = linear(n, attn + "q_proj", config.qWidth(), hidden);
  Value k = linear(n, attn + "k_proj", config.kvWidth(), hidden);
  Value v = linear(n, attn + "v_proj", config.kvWidth(), hidden);
  auto heads = [&](Value flat, int64_t count, const std::string &module) -> Value {
    return SplitHeadsOp::create(b, loc(module), tensor({tokens, count, headDim}, act), flat);
  };
  auto headNorm = [&](Value h, const std::string &module) -> Value {
    Value w = weight(module + ".weight", {headDim});
    return HeadNormOp::create(b, loc(module), h.getType(), h, w,
                              b.getF64FloatAttr(config.rmsNormEps));
  };
  auto rope = [&](Value h, const std::string &module) -> Value {
    return RopeOp::create(b, loc(module), h.getType(), h, positions,
                          b.getF64FloatAttr(config.ropeTheta));
  };
  Value q3 = rope(headNorm(heads(q, qHeads, attn + "q_proj"), attn + "q_norm"), attn + "q_norm");
  Value k3 = rope(headNorm(heads(k, kvHeads, attn + "k_proj"), attn + "k_norm"), attn + "k_norm");
  Value v3 = heads(v, kvHeads, attn + "v_proj");
  IntegerAttr window;
  if (!config.isGlobalLayer(layer))
    window = b.getI64IntegerAttr(config.slidingWindow);
  Type kvType = options.kvType == KvDType::BF16  ? Type(b.getBF16Type())
                : options.kvType == KvDType::FP8 ? Type(b.getType<Float8E4M3FNType>())
                                                 : Type(b.getF32Type());
  DenseF64ArrayAttr kvScales;
  if (options.kvType == KvDType::FP8) {
    KvScale s =
        layer < static_cast<int64_t>(options.kvScales.size()) ? options.kvScales[layer] : KvScale{};
    kvScales = b.getDenseF64ArrayAttr({s.keys, s.values});
  }
  Value a = AttentionOp::create(
      b, loc(attn + "attn"), tensor({tokens, qHeads, headDim}, act), q3, k3, v3, positions,
      b.getF64FloatAttr(1.0 / std::sqrt(double(headDim))), window, TypeAttr::get(kvType), kvScales);
  Value merged = MergeHeadsOp::create(b, loc(attn + "o_proj"), acts(config.qWidth()), a);
  return linear(merged, attn + "o_proj", hidden, config.qWidth());
}

Value ForwardBuilder::latentMoE(Value u, int64_t layer) {
  std::string mlp = layerPrefix(layer) + "mlp.";
  int64_t hidden = config.hiddenSize, latent = config.moeLatentSize;
  int64_t inter = config.moeIntermediateSize, k = config.numExpertsPerTok;
  Value logits = linear(u, mlp + "router", config.numExperts, hidden, b.getF32Type());
  auto topk = RouterTopKOp::create(
      b, loc(mlp + "router"),
      TypeRange{tensor({tokens, k}, b.getF32Type()), tensor({tokens, k}, b.getI32Type())}, logits,
      b.getI64IntegerAttr(k));
  Value z = rmsNorm(linear(u, mlp + "pooler", latent, hidden), mlp + "expert_input_norm");
  Value gate = expertProjection(layer, "gate_proj", inter, latent);
  Value up = expertProjection(layer, "up_proj", inter, latent);
  Value down = expertProjection(layer, "down_proj", latent, inter);
  std::string experts = mlp + "experts";
  Value y = ExpertSwiGLUOp::create(b, loc(experts), tensor({tokens, k, latent}, act), z,
                                   topk.getIndices(), gate, up, down);
  Value postNorm = weight(mlp + "experts.{e}.post_norm.weight", {config.numExperts, latent});
  Value yn =
      ExpertNormOp::create(b, loc(mlp + "experts.{e}.post_norm"), y.getType(), y, topk.getIndices(),
                           postNorm, b.getF64FloatAttr(config.rmsNormEps));
  Value s = CombineOp::create(b, loc(experts), acts(latent), yn, topk.getWeights());
  return linear(s, mlp + "unpooler", hidden, latent);
}

Value ForwardBuilder::layer(Value x, Value positions, int64_t layer) {
  std::string prefix = layerPrefix(layer);
  Value a = attention(x, positions, layer);
  Value h = gatedResidual(x, a, prefix + "post_attention_layernorm", prefix + "attn_residual_gate");
  Value u = rmsNorm(h, prefix + "pre_feedforward_layernorm");
  Value m = latentMoE(u, layer);
  return gatedResidual(h, m, prefix + "post_feedforward_layernorm", prefix + "mlp_residual_gate");
}

OwningOpRef<ModuleOp> ForwardBuilder::build() {
  Location modelLoc = loc("model");
  OwningOpRef<ModuleOp> module = ModuleOp::create(modelLoc);
  module->getOperation()->setAttr(kModelAttrName, b.getStringAttr(config.name));
  module->getOperation()->setAttr(
      kWeightFormatAttrName,
      CheckpointFormatAttr::get(b.getContext(), options.format == WeightFormat::NVFP4
                                                    ? CheckpointFormat::NVFP4
                                                    : CheckpointFormat::BF16));
  b.setInsertionPointToEnd(module->getBody());

  int64_t vocab = config.vocabSize, hidden = config.hiddenSize;
  RankedTensorType idsType = tensor({tokens}, b.getI32Type());
  RankedTensorType logitsType =
      tensor({options.lastTokenLogits ? 1 : tokens, vocab}, b.getF32Type());
  auto func = func::FuncOp::create(b, modelLoc, "forward",
                                   b.getFunctionType({idsType, idsType}, {logitsType}));
  func.setArgAttr(0, "kiln.name", b.getStringAttr("input_ids"));
  func.setArgAttr(1, "kiln.name", b.getStringAttr("positions"));
  b.setInsertionPointToStart(func.addEntryBlock());
  Value ids = func.getArgument(0), positions = func.getArgument(1);

  Value table = weight("model.embed_tokens.weight", {vocab, hidden});
  Value x = EmbedOp::create(b, loc("model.embed_tokens"), acts(hidden), table, ids);
  for (int64_t i = 0; i < config.numHiddenLayers; ++i) {
    x = layer(x, positions, i);
    if (options.progress)
      options.progress(i + 1, config.numHiddenLayers);
  }
  Value normed = rmsNorm(x, "model.norm");
  Value head = weight("lm_head.weight", {vocab, hidden});
  auto logits = LogitsOp::create(b, loc("lm_head"), logitsType, normed, head,
                                 options.lastTokenLogits ? b.getUnitAttr() : UnitAttr());
  func::ReturnOp::create(b, loc("lm_head"), logits.getResult());
  return module;
}

} // namespace

OwningOpRef<ModuleOp> buildForwardGraph(MLIRContext &context, const Config &config,
                                        const GraphOptions &options) {
  return ForwardBuilder(context, config, options).build();
}

} // namespace kiln::muse_spark
