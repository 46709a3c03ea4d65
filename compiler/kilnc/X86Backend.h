// kilnc's x86 back end: graph (after the graph pipeline) ▸ plan (memory
// planned) ▸ kernels ▸ kernel library ▸ artifact.
#pragma once

#include "models/muse_spark/Config.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <string>

namespace kiln {

enum class BackendOutput { Plan, Kernels, Library, Artifact };

struct BackendRequest {
  BackendOutput output = BackendOutput::Artifact;
  std::string outputPath = "-";
  int64_t maxPrefillTokens = 64;
  bool report = false;
  const muse_spark::Config *config = nullptr;
  muse_spark::WeightFormat format = muse_spark::WeightFormat::BF16;
};

// Returns the process exit code; errors are printed.
int runX86Backend(mlir::ModuleOp graph, const BackendRequest &request);

} // namespace kiln
