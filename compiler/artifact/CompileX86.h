// Graph (after the graph pipeline) to x86 artifact, the steps kilnc runs:
// lower to the plan, plan memory, generate and compile the kernels, write the
// flatbuffer and check it with the runtime's own verifier.
#pragma once

#include "models/muse_spark/Config.h"
#include "targets/x86/LowerToPlan.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

// Lowers `graph` to the x86 plan and assigns arena offsets.
mlir::FailureOr<x86::LoweredModel> lowerAndPlanX86(mlir::ModuleOp graph, int64_t maxPrefillTokens);

struct X86Build {
  x86::LoweredModel model;
  std::vector<uint8_t> library;  // the ELF kernel library
  std::vector<uint8_t> artifact; // the whole artifact, verified
};

// Everything; `error` says what failed (diagnostics are emitted as well).
mlir::FailureOr<X86Build> buildX86Artifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           muse_spark::WeightFormat format,
                                           int64_t maxPrefillTokens, std::string &error);

} // namespace kiln
