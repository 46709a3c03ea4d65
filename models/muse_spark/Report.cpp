// The numbers `kilnc --report` prints, all read off the built graph.
#include "models/muse_spark/Report.h"

#include "dialects/kiln/CheckpointDType.h"
#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>
#include <vector>

using namespace mlir;

namespace kiln::muse_spark {

int64_t ParameterBudget::total() const {
  int64_t sum = 0;
  for (int64_t p : byPart)
    sum += p;
  return sum;
}

int64_t ParameterBudget::activeMatrices(const Config &config) const {
  return part(WeightPart::Attention) + part(WeightPart::Latent) +
         part(WeightPart::Experts) / config.numExperts * config.numExpertsPerTok;
}

// Fused ops carry a FusedLoc of their parts: the first part decides.
int64_t layerOf(Location loc) {
  if (auto fused = llvm::dyn_cast<FusedLoc>(loc)) {
    for (Location part : fused.getLocations())
      if (int64_t layer = layerOf(part); layer >= 0)
        return layer;
    return -1;
  }
  auto name = llvm::dyn_cast<NameLoc>(loc);
  if (!name)
    return -1;
  StringRef rest = name.getName().getValue();
  if (!rest.consume_front("model.layers."))
    return -1;
  int64_t layer;
  if (rest.consumeInteger(10, layer))
    return -1;
  return layer;
}

namespace {

std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// 42.65B, 131.07M, 4.10K: parameter counts as people quote them.
std::string billions(int64_t params) {
  std::string s;
  llvm::raw_string_ostream os(s);
  if (params >= 1000000000)
    os << llvm::format("%.2fB", double(params) / 1e9);
  else if (params >= 1000000)
    os << llvm::format("%.2fM", double(params) / 1e6);
  else
    os << llvm::format("%.2fK", double(params) / 1e3);
  return s;
}

} // namespace

FailureOr<ParameterBudget> countParameters(ModuleOp module, const Config &config,
                                           WeightFormat format) {
  std::vector<TensorSpec> manifest = checkpointManifest(config, format);
  llvm::StringMap<const TensorSpec *> byName;
  for (const TensorSpec &spec : manifest)
    byName[spec.name] = &spec;

  ParameterBudget budget;
  budget.manifestTensors = static_cast<int64_t>(manifest.size());
  llvm::StringMap<bool> counted; // a tensor read twice is counted once
  WalkResult walk = module.walk([&](WeightOp weight) -> WalkResult {
    RankedTensorType type = weight.getResult().getType();
    bool stack = weight.isExpertStack();
    ArrayRef<int64_t> shape = stack ? type.getShape().drop_front() : type.getShape();
    int64_t copies = stack ? type.getDimSize(0) : 1;
    std::optional<DType> dtype = checkpointDType(type.getElementType());
    for (int64_t e = 0; e < copies; ++e) {
      std::string name = weight.expandedName(e);
      const TensorSpec *spec = byName.lookup(name);
      if (!spec)
        return weight.emitOpError() << "'" << name << "' is not a tensor of a "
                                    << (format == WeightFormat::NVFP4 ? "NVFP4" : "BF16")
                                    << " checkpoint of " << config.name;
      if (spec->shape != std::vector<int64_t>(shape.begin(), shape.end()) || spec->dtype != dtype)
        return weight.emitOpError()
               << "'" << name << "' is " << dtypeName(spec->dtype) << " " << shapeStr(spec->shape)
               << " in the checkpoint, but the graph reads it as " << type;
      if (counted.try_emplace(name, true).second) {
        budget.byPart[static_cast<size_t>(spec->part)] += spec->parameters;
        ++budget.referencedTensors;
      }
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  return budget;
}

void printReport(llvm::raw_ostream &os, ModuleOp module, const Config &config, WeightFormat format,
                 const ParameterBudget &budget, const BuildStats &stats) {
  int64_t layers = config.numHiddenLayers;
  os << "model " << config.name << ": " << layers << " layers, hidden " << config.hiddenSize
     << ", heads " << config.numAttentionHeads << "/" << config.numKeyValueHeads << " x "
     << config.headDim << ", " << config.numExperts << " experts top-" << config.numExpertsPerTok
     << " (latent " << config.moeLatentSize << ", intermediate " << config.moeIntermediateSize
     << "), vocab " << config.vocabSize << "\n";
  os << "weights: "
     << (format == WeightFormat::NVFP4
             ? "nvfp4 experts in layers 1.." + std::to_string(layers - 2) + ", bf16 elsewhere"
             : std::string("bf16"))
     << "; the graph reads " << budget.referencedTensors << " of the checkpoint's "
     << budget.manifestTensors << " tensors\n";

  // Ops per layer, grouped by identical op mix.
  std::vector<std::map<std::string, int64_t>> perLayer(layers);
  int64_t totalOps = 0;
  module.walk([&](Operation *op) {
    if (llvm::isa<ModuleOp, func::FuncOp, shard::GridOp>(op))
      return;
    ++totalOps;
    int64_t layer = layerOf(op->getLoc());
    if (layer >= 0 && layer < layers)
      ++perLayer[layer][op->getName().getStringRef().str()];
  });
  os << "graph: " << totalOps << " ops, built in " << llvm::format("%.3f", stats.seconds)
     << " s, peak memory " << stats.peakRssKiB / 1024 << " MiB\n";

  os << "\nparameters by part:\n";
  auto row = [&](StringRef label, int64_t params, StringRef note = "") {
    os << "  " << llvm::left_justify(label, 20) << llvm::right_justify(billions(params), 9)
       << llvm::right_justify(std::to_string(params), 14);
    if (!note.empty())
      os << "  " << note;
    os << "\n";
  };
  row("experts", budget.part(WeightPart::Experts),
      std::to_string(config.numExperts) + " x 3 projections + post_norm, per layer");
  row("attention", budget.part(WeightPart::Attention), "q, k, v, o and q/k norms");
  row("latent projections", budget.part(WeightPart::Latent), "pooler, unpooler, expert input norm");
  row("router", budget.part(WeightPart::Router));
  row("norms and gates", budget.part(WeightPart::Norms));
  row("embedding + head", budget.part(WeightPart::Embedding) + budget.part(WeightPart::Head));
  row("total", budget.total());
  int64_t active = budget.activeMatrices(config);
  os << "active per token: " << billions(active) << " (" << active
     << ") without embedding/head (attention + latent + " << config.numExpertsPerTok << " of "
     << config.numExperts << " experts "
     << billions(budget.part(WeightPart::Experts) / config.numExperts * config.numExpertsPerTok)
     << "); router and norms add "
     << billions(budget.part(WeightPart::Router) + budget.part(WeightPart::Norms)) << "\n";

  // Grouped so that each group ends at a global layer, as the pattern does.
  os << "\nlayer pattern (S sliding, G global): ";
  for (int64_t i = 0; i < layers; ++i)
    os << (i && config.isGlobalLayer(i - 1) ? " " : "") << (config.isGlobalLayer(i) ? 'G' : 'S');
  int64_t global = config.numGlobalLayers();
  os << "\n  " << layers - global << " sliding (window " << config.slidingWindow << ") + " << global
     << " global, last layer " << (config.isGlobalLayer(layers - 1) ? "global" : "sliding") << "\n";

  os << "\nops per layer:\n";
  std::vector<bool> done(layers, false);
  for (int64_t i = 0; i < layers; ++i) {
    if (done[i])
      continue;
    std::vector<int64_t> same;
    for (int64_t j = i; j < layers; ++j)
      if (!done[j] && perLayer[j] == perLayer[i]) {
        same.push_back(j);
        done[j] = true;
      }
    int64_t count = 0;
    for (const auto &[name, n] : perLayer[i])
      count += n;
    os << "  " << same.size() << " layer" << (same.size() == 1 ? "" : "s") << " (";
    for (size_t k = 0; k < same.size() && k < 8; ++k)
      os << (k ? " " : "") << same[k];
    os << (same.size() > 8 ? " ..." : "") << "): " << count << " ops =";
    bool first = true;
    for (const auto &[name, n] : perLayer[i]) {
      os << (first ? " " : ", ") << n << " " << name;
      first = false;
    }
    os << "\n";
  }
}

} // namespace kiln::muse_spark
