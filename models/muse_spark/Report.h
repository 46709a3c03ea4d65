// `kilnc --report`: what a built graph holds. The parameter budget by part
// (each graph weight looked up in the checkpoint manifest, which also checks
// the graph against it), the layer pattern and the ops per layer.
#pragma once

#include "models/muse_spark/Config.h"
#include "models/muse_spark/WeightManifest.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <array>
#include <cstdint>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace kiln::muse_spark {

inline constexpr size_t kNumWeightParts = 7;

struct ParameterBudget {
  std::array<int64_t, kNumWeightParts> byPart{}; // indexed by WeightPart
  int64_t referencedTensors = 0;                 // checkpoint tensors the graph reads
  int64_t manifestTensors = 0;                   // checkpoint tensors the format has

  int64_t part(WeightPart p) const { return byPart[static_cast<size_t>(p)]; }
  int64_t total() const;
  // Parameters one token runs through, without embedding and head: attention,
  // latent projections and k of E experts (router and norms apart).
  int64_t activeMatrices(const Config &config) const;
};

// The decoder layer an op belongs to, from its name location
// ("model.layers.12.mlp..."; a fused op's first part that has one), or -1
// outside the decoder layers.
int64_t layerOf(mlir::Location loc);

// Sums the parameters of every checkpoint tensor the graph references. Emits
// an error on the op and fails when a graph weight is missing from the
// checkpoint manifest or has another shape or element type there.
mlir::FailureOr<ParameterBudget> countParameters(mlir::ModuleOp module, const Config &config,
                                                 WeightFormat format);

struct BuildStats {
  double seconds = 0;     // building the graph
  int64_t peakRssKiB = 0; // of the whole process, after building
};

void printReport(llvm::raw_ostream &os, mlir::ModuleOp module, const Config &config,
                 WeightFormat format, const ParameterBudget &budget, const BuildStats &stats);

} // namespace kiln::muse_spark
