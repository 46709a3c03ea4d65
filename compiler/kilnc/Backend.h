// kilnc's back end: graph (after the graph pipeline) ▸ plan (memory
// planned) ▸ kernels ▸ kernel library ▸ artifact, for the chosen target.
#pragma once

#include "compiler/artifact/CompileTarget.h"
#include "models/muse_spark/Config.h"

#include "mlir/IR/BuiltinOps.h"

#include <cstdint>
#include <optional>
#include <string>

namespace kiln {

enum class BackendOutput { Plan, Kernels, Library, Artifact };

struct BackendRequest {
  BackendOutput output = BackendOutput::Artifact;
  TargetChoice target;
  std::string outputPath = "-";
  int64_t maxPrefillTokens = 64;
  int64_t decodeBatch = 1;  // conversations of the decode_batch entry (1: none)
  int64_t verifyTokens = 0; // tokens of the verify entry (0: none)
  int64_t kvPageTokens = 0; // the global layers' KV page (0: unpaged)
  bool peerExchange = true; // EP decode combines through peer memory where the target can
  bool report = false;
  // Stage lines on stderr.
  bool progress = false;
  // The graph after the pipeline with sequence parallelism (null: none).
  mlir::ModuleOp spGraph;
  const muse_spark::Config *config = nullptr;
};

// Returns the process exit code; errors are printed.
int runBackend(mlir::ModuleOp graph, const BackendRequest &request);

} // namespace kiln
