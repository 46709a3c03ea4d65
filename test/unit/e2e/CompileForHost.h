// A model compiled for this CPU as kilnc --target=x86 --cpu=host compiles
// it (the graph pipeline with its fusions, then the x86 back end), for the
// end-to-end tests that run artifacts of their own lowering options.
#pragma once

#include "compiler/artifact/CompileTarget.h"
#include "test/unit/e2e/ForwardGraph.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::e2e {

// The artifact's bytes; empty, with the test failed, where it does not compile.
inline std::vector<uint8_t> compileForHost(const muse_spark::Config &config,
                                           muse_spark::WeightFormat format,
                                           const kernels::LowerOptions &lower) {
  mlir::MLIRContext context;
  loadDialects(context);
  mlir::OwningOpRef<mlir::ModuleOp> module = forwardGraph(context, config, format, true);
  std::string error;
  std::optional<x86::CpuTarget> cpu = x86::resolveCpu("host", error);
  EXPECT_TRUE(cpu) << error;
  if (!cpu)
    return {};
  mlir::FailureOr<TargetBuild> build =
      buildArtifact(*module, config, lower, TargetChoice::x86(*cpu), error);
  EXPECT_TRUE(mlir::succeeded(build)) << error;
  return mlir::succeeded(build) ? build->artifact : std::vector<uint8_t>();
}

} // namespace kiln::e2e
