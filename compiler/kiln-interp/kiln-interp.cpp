// kiln-interp: runs Muse Spark on a checkpoint with the fp32 reference
// interpreter: a prefill of the prompt, then greedy generation.
#include "compiler/interpreter/Interpreter.h"
#include "compiler/interpreter/ReferenceOps.h"
#include "dialects/kiln/KilnDialect.h"
#include "models/muse_spark/GraphBuilder.h"
#include "models/muse_spark/Report.h"
#include "runtime/core/AtomicFile.h"
#include "runtime/core/QuoteName.h"
#include "runtime/engine/Reference.h"
#include "runtime/safetensors/DecoderTensors.h"
#include "runtime/safetensors/NonFinite.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace cl = llvm::cl;
using namespace kiln;
using namespace kiln::muse_spark;

namespace {

cl::OptionCategory category("kiln-interp options");
cl::opt<std::string> weightsDir("weights", cl::Required, cl::value_desc("dir"),
                                cl::desc("Checkpoint directory (safetensors + config.json)"),
                                cl::cat(category));
cl::opt<std::string> configArg("config", cl::value_desc("config"),
                               cl::desc("Config path or built-in name (default: DIR/config.json)"),
                               cl::cat(category));
cl::opt<std::string> promptIds("prompt-ids", cl::Required, cl::value_desc("1,2,3"),
                               cl::desc("Prompt token ids, comma-separated"), cl::cat(category));
cl::opt<int64_t> maxNewTokens("max-new-tokens", cl::init(0),
                              cl::desc("Tokens to generate greedily after the prompt"),
                              cl::cat(category));
cl::opt<std::string> saveReference(
    "save-reference", cl::value_desc("file"),
    cl::desc("Write the prompt's last logits and --max-new-tokens greedy steps (token and margin) "
             "as a reference for kiln-check"),
    cl::cat(category));
cl::opt<interp::LinearInputs> linearInputs(
    "linear-inputs", cl::desc("What linear layers multiply (default f32)"),
    cl::init(interp::LinearInputs::F32),
    cl::values(clEnumValN(interp::LinearInputs::F32, "f32", "the exact f32 activations"),
               clEnumValN(interp::LinearInputs::Bf16, "bf16",
                          "the activations rounded to bf16, as the compiled tensor-core and "
                          "x86 matrix GEMMs read them (routers' logits stay exact)")),
    cl::cat(category));
cl::opt<interp::AttentionInputs> attentionInputs(
    "attention-inputs", cl::desc("What attention multiplies (default f32)"),
    cl::init(interp::AttentionInputs::F32),
    cl::values(clEnumValN(interp::AttentionInputs::F32, "f32", "the exact f32 q, k, v"),
               clEnumValN(interp::AttentionInputs::Bf16, "bf16",
                          "q, k, v and the softmax numerators rounded to bf16, as the compiled "
                          "tensor-core attention reads them")),
    cl::cat(category));
cl::opt<KvDType>
    kvDType("kv-dtype",
            cl::desc("The KV cache's element type attention rounds keys and values to, as "
                     "kilnc --kv-dtype compiles it (default bf16)"),
            cl::init(KvDType::BF16),
            cl::values(clEnumValN(KvDType::BF16, "bf16", "keys and values rounded to bf16"),
                       clEnumValN(KvDType::F32, "f32", "keys and values exact"),
                       clEnumValN(KvDType::FP8, "fp8",
                                  "keys and values rounded to e4m3 with their layer's scales "
                                  "(--kv-scales)")),
            cl::cat(category));
cl::opt<std::string> kvScalesPath("kv-scales", cl::value_desc("file"),
                                  cl::desc("With --kv-dtype=fp8: every layer's k_scale and "
                                           "v_scale, as kilnc --kv-scales takes them (default 1)"),
                                  cl::cat(category));
cl::opt<std::string> calibrateKvScales(
    "calibrate-kv-scales", cl::value_desc("file"),
    cl::desc("Write FP8 KV scales for kilnc --kv-scales: each layer's largest |key| and |value| "
             "over the prompt's prefill, over 448 (the e4m3 maximum)"),
    cl::cat(category));
cl::opt<int64_t> topLogits("print-top-logits", cl::init(0),
                           cl::desc("Print the N largest logits of the prompt's last token"),
                           cl::cat(category));

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kiln-interp") << message << "\n";
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(argc, argv,
                              "kiln-interp: the fp32 reference interpreter of Kiln. Builds the "
                              "Muse Spark graph for the checkpoint's config and runs it.\n\n"
                              "  kiln-interp --weights ckpt/ --prompt-ids 1,2,3 "
                              "--max-new-tokens 8\n");
  try {
    Config config = loadConfig(configArg.empty() ? weightsDir + "/config.json" : configArg);
    std::vector<int32_t> prompt;
    for (llvm::StringRef piece : llvm::split(llvm::StringRef(promptIds), ',')) {
      int32_t id;
      if (piece.trim().getAsInteger(10, id) || id < 0 || id >= config.vocabSize)
        return fail("--prompt-ids: " + quoteName(piece) + " is not a token id in [0, " +
                    llvm::Twine(config.vocabSize) + ")");
      prompt.push_back(id);
    }
    if (maxNewTokens < 0)
      return fail("--max-new-tokens must not be negative");
    if (topLogits < 0)
      return fail("--print-top-logits takes a count of 0 or more, not " + llvm::Twine(topLogits));
    // The prompt and every generated token take a position.
    const int64_t positionsLeft = config.maxPositionEmbeddings - int64_t(prompt.size());
    if (positionsLeft < 0)
      return fail("--prompt-ids: " + llvm::Twine(int64_t(prompt.size())) +
                  " tokens, more than the model's max_position_embeddings (" +
                  llvm::Twine(config.maxPositionEmbeddings) + ")");
    if (maxNewTokens > positionsLeft)
      return fail("--max-new-tokens " + llvm::Twine(int64_t(maxNewTokens)) + ": the prompt's " +
                  llvm::Twine(int64_t(prompt.size())) + " tokens and these pass the model's " +
                  "max_position_embeddings (" + llvm::Twine(config.maxPositionEmbeddings) +
                  "); at most " + llvm::Twine(positionsLeft));

    mlir::MLIRContext context;
    context.loadDialect<KilnDialect, mlir::func::FuncDialect>();
    GraphOptions options;
    options.tokens = mlir::ShapedType::kDynamic;
    options.format = config.quantization ? WeightFormat::NVFP4 : WeightFormat::BF16;
    options.kvType = kvDType;
    if (!kvScalesPath.empty()) {
      if (kvDType != KvDType::FP8)
        return fail("--kv-scales " + kvScalesPath + ": scales are an FP8 cache's (--kv-dtype=fp8)");
      options.kvScales = readKvScales(kvScalesPath, config);
    }
    mlir::OwningOpRef<mlir::ModuleOp> module = buildForwardGraph(context, config, options);
    if (mlir::failed(mlir::verify(*module)))
      return fail("the graph for " + config.name + " does not verify");
    auto forward = module->lookupSymbol<mlir::func::FuncOp>("forward");

    interp::CheckpointWeights weights(weightsDir);
    // Layers or experts the config does not have would silently go unused.
    if (std::string problem =
            tensorsBeyond(weights.tensorNames(), config.numHiddenLayers - 1, config.numExperts,
                          "checkpoint " + weightsDir, "the config's model");
        !problem.empty())
      return fail(problem);
    interp::Interpreter interpreter(weights, linearInputs, attentionInputs);
    // Each layer's largest |key| and |value| over the prefill.
    std::vector<KvScale> amax(config.numHiddenLayers, KvScale{0, 0});
    if (!calibrateKvScales.empty())
      interpreter.observeAttention([&](mlir::Operation *attention, const interp::HostTensor &k,
                                       const interp::HostTensor &v) {
        const int64_t layer = layerOf(attention->getLoc());
        if (layer < 0 || layer >= config.numHiddenLayers)
          throw std::runtime_error("--calibrate-kv-scales: an attention op outside a layer");
        for (float x : k.f)
          amax[layer].keys = std::max(amax[layer].keys, double(std::fabs(x)));
        for (float x : v.f)
          amax[layer].values = std::max(amax[layer].values, double(std::fabs(x)));
      });
    int64_t n = static_cast<int64_t>(prompt.size());
    std::vector<int32_t> positions(n);
    std::iota(positions.begin(), positions.end(), 0);
    std::vector<interp::HostTensor> out = interpreter.run(
        forward, {interp::HostTensor::ints({n}, prompt), interp::HostTensor::ints({n}, positions)});
    if (!calibrateKvScales.empty()) {
      interpreter.observeAttention(nullptr);
      // A tensor of zeros keeps scale 1; a non-finite one cannot be scaled.
      for (KvScale &s : amax) {
        if (!std::isfinite(s.keys) || !std::isfinite(s.values))
          return fail("--calibrate-kv-scales: a key or value is not finite");
        s.keys = s.keys > 0 ? s.keys / kE4m3Max : 1;
        s.values = s.values > 0 ? s.values / kE4m3Max : 1;
      }
      writeFileAtomically(calibrateKvScales, kvScalesJson(amax));
      llvm::outs() << "kv scales: " << calibrateKvScales << " (" << config.numHiddenLayers
                   << " layers, from " << n << " tokens)\n";
    }
    const interp::HostTensor &logits = out.at(0);
    int64_t vocab = logits.dim(1);
    const float *last = &logits.f[logits.f.size() - vocab];
    // A NaN in a weight reaches every logit: refused, not printed as tokens.
    auto requireFinite = [&](const float *row, const llvm::Twine &what) {
      if (std::string found = nonFiniteLogits(row, static_cast<size_t>(vocab)); !found.empty())
        throw std::runtime_error((what + ": " + found +
                                  ": a weight or the computation is not finite (kiln-ckpt check "
                                  "names non-finite weights)")
                                     .str());
    };
    requireFinite(last, "prefill of " + llvm::Twine(n) + " tokens");
    if (topLogits > 0) {
      std::vector<int32_t> order(vocab);
      std::iota(order.begin(), order.end(), 0);
      int64_t k = std::min<int64_t>(topLogits, vocab);
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int32_t a, int32_t b) { return last[a] > last[b]; });
      llvm::outs() << "top logits:";
      for (int64_t j = 0; j < k; ++j)
        llvm::outs() << " " << order[j] << "=" << llvm::format("%.4f", last[order[j]]);
      llvm::outs() << "\n";
    }
    if (!saveReference.empty()) {
      Reference reference;
      reference.source =
          std::string("kiln-interp (fp32 reference interpreter") +
          (linearInputs == interp::LinearInputs::Bf16 ? ", bf16 linear inputs" : "") +
          (attentionInputs == interp::AttentionInputs::Bf16 ? ", bf16 attention inputs" : "") +
          (kvDType == KvDType::BF16  ? ", bf16 KV"
           : kvDType == KvDType::FP8 ? ", fp8 KV"
                                     : ", f32 KV") +
          ")";
      reference.prompt = prompt;
      reference.logits.assign(last, last + vocab);
      std::vector<int32_t> ids = prompt;
      std::vector<float> logitsNow = reference.logits;
      for (int64_t step = 0; step < maxNewTokens; ++step) {
        ReferenceStep s = greedyStep(logitsNow);
        if (step > 0)
          s.logits = logitsNow;
        reference.steps.push_back(s);
        ids.push_back(s.token);
        int64_t m = static_cast<int64_t>(ids.size());
        std::vector<int32_t> pos(m);
        std::iota(pos.begin(), pos.end(), 0);
        const interp::HostTensor next = interpreter
                                            .run(forward, {interp::HostTensor::ints({m}, ids),
                                                           interp::HostTensor::ints({m}, pos)})
                                            .at(0);
        logitsNow.assign(next.f.end() - vocab, next.f.end());
        requireFinite(logitsNow.data(), "greedy step " + llvm::Twine(step));
      }
      writeReference(saveReference, reference);
      llvm::outs() << "reference: " << saveReference << " (" << reference.steps.size()
                   << " greedy steps)\n";
      return 0;
    }
    if (maxNewTokens > 0) {
      std::vector<int32_t> generated =
          interp::generateGreedy(interpreter, forward, prompt, maxNewTokens);
      llvm::outs() << "generated:";
      for (int32_t id : generated)
        llvm::outs() << " " << id;
      llvm::outs() << "\n";
    }
  } catch (const std::exception &error) {
    return fail(error.what());
  }
  return 0;
}
