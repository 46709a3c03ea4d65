#include "compiler/artifact/CompileX86.h"

#include "compiler/artifact/ArtifactWriter.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "passes/Passes.h"
#include "runtime/artifact/Artifact.h"
#include "targets/x86/KernelCompiler.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {

mlir::FailureOr<x86::LoweredModel> lowerAndPlanX86(mlir::ModuleOp graph, int64_t maxPrefillTokens) {
  x86::LowerOptions options;
  options.maxPrefillTokens = maxPrefillTokens;
  mlir::FailureOr<x86::LoweredModel> lowered = x86::lowerToPlan(graph, options);
  if (mlir::failed(lowered))
    return mlir::failure();
  mlir::PassManager pm(graph.getContext());
  pm.addPass(createPlanAssignOffsets());
  if (mlir::failed(pm.run(*lowered->plan)))
    return mlir::failure();
  return lowered;
}

mlir::FailureOr<X86Build> buildX86Artifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           muse_spark::WeightFormat format,
                                           int64_t maxPrefillTokens, std::string &error) {
  mlir::FailureOr<x86::LoweredModel> lowered = lowerAndPlanX86(graph, maxPrefillTokens);
  if (mlir::failed(lowered)) {
    error = "lowering to the x86 plan failed (see above)";
    return mlir::failure();
  }
  X86Build build{std::move(*lowered), {}, {}};
  mlir::MLIRContext kernelContext;
  if (!x86::compileKernelLibrary(kernelContext, build.model.kernels, x86::CompileOptions(),
                                 build.library, error))
    return mlir::failure();
  ArtifactInfo info;
  info.modelName = config.name;
  info.configJson = muse_spark::checkpointConfigJson(config, format);
  info.weightFormat = format == muse_spark::WeightFormat::NVFP4 ? "nvfp4" : "bf16";
  info.features = x86::requiredCpuFeatures();
  mlir::FailureOr<std::vector<uint8_t>> bytes = serializeArtifact(build.model, build.library, info);
  if (mlir::failed(bytes)) {
    error = "serialising the artifact failed (see above)";
    return mlir::failure();
  }
  try {
    // The runtime's checks: kilnc never writes an artifact the runtime refuses.
    Artifact::fromBytes(*bytes, "<kilnc output>");
  } catch (const ArtifactError &e) {
    error = std::string("the artifact fails the runtime's checks: ") + e.what();
    return mlir::failure();
  }
  build.artifact = std::move(*bytes);
  return build;
}

} // namespace kiln
