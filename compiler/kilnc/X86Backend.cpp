#include "compiler/kilnc/X86Backend.h"

#include "compiler/artifact/ArtifactWriter.h"
#include "dialects/plan/PlanOps.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "passes/Passes.h"
#include "runtime/artifact/ArtifactFile.h"
#include "runtime/artifact/Artifact.h"
#include "targets/x86/KernelCompiler.h"
#include "targets/x86/LowerToPlan.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln {
namespace {

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kilnc") << message << "\n";
  return 1;
}

// Text outputs go to stdout or, whole, to the -o file.
int writeText(const std::string &path, const std::string &text) {
  if (path == "-") {
    llvm::outs() << text;
    return 0;
  }
  try {
    writeFileAtomically(path, reinterpret_cast<const uint8_t *>(text.data()), text.size());
  } catch (const ArtifactError &error) {
    return fail(error.what());
  }
  return 0;
}

} // namespace

int runX86Backend(mlir::ModuleOp graph, const BackendRequest &request) {
  x86::LowerOptions options;
  options.maxPrefillTokens = request.maxPrefillTokens;
  mlir::FailureOr<x86::LoweredModel> lowered = x86::lowerToPlan(graph, options);
  if (mlir::failed(lowered))
    return fail("lowering to the x86 plan failed (see above)");

  mlir::PassManager pm(graph.getContext());
  pm.addPass(createPlanAssignOffsets());
  if (mlir::failed(pm.run(*lowered->plan)))
    return fail("memory planning failed (see above)");

  if (request.output == BackendOutput::Plan) {
    std::string text;
    llvm::raw_string_ostream os(text);
    lowered->plan->print(os);
    os << "\n";
    return writeText(request.outputPath, text);
  }
  mlir::MLIRContext kernelContext;
  if (request.output == BackendOutput::Kernels) {
    mlir::OwningOpRef<mlir::ModuleOp> kernels =
        x86::parseKernelModule(kernelContext, lowered->kernels);
    if (!kernels)
      return fail("the generated kernels do not parse or verify (see above)");
    std::string text;
    llvm::raw_string_ostream os(text);
    kernels->print(os);
    os << "\n";
    return writeText(request.outputPath, text);
  }

  if (request.outputPath == "-")
    return fail("an artifact or kernel library is binary: name the file with -o");
  std::vector<uint8_t> library;
  std::string error;
  if (!x86::compileKernelLibrary(kernelContext, lowered->kernels, x86::CompileOptions(), library,
                                 error))
    return fail(error);
  if (request.output == BackendOutput::Library) {
    try {
      writeFileAtomically(request.outputPath, library.data(), library.size());
    } catch (const ArtifactError &e) {
      return fail(e.what());
    }
    return 0;
  }

  ArtifactInfo info;
  info.modelName = request.config->name;
  info.configJson = muse_spark::checkpointConfigJson(*request.config, request.format);
  info.weightFormat = request.format == muse_spark::WeightFormat::NVFP4 ? "nvfp4" : "bf16";
  info.features = x86::requiredCpuFeatures();
  mlir::FailureOr<std::vector<uint8_t>> bytes = serializeArtifact(*lowered, library, info);
  if (mlir::failed(bytes))
    return fail("serialising the artifact failed (see above)");
  try {
    // The runtime's own checks, before the file exists: kilnc never writes
    // an artifact the runtime would refuse.
    Artifact::fromBytes(*bytes, request.outputPath);
    writeFileAtomically(request.outputPath, bytes->data(), bytes->size());
  } catch (const ArtifactError &e) {
    return fail(e.what());
  }
  if (request.report) {
    llvm::outs() << "\nx86 artifact " << request.outputPath << ": " << bytes->size() << " bytes, "
                 << lowered->kernels.size() << " kernels (" << library.size()
                 << " bytes of code), " << lowered->weights.size() << " weight bindings, "
                 << lowered->kvCaches.size() << " KV caches\n";
    for (auto entry : lowered->plan->getOps<plan::EntryOp>()) {
      int64_t launches = 0;
      for (auto &op : entry.getBody().front())
        launches += llvm::isa<plan::LaunchOp>(op);
      llvm::outs() << "  entry " << entry.getSymName() << ": up to " << entry.getMaxTokens()
                   << " tokens, " << launches << " launches, arena "
                   << entry.getArenaBytes().value_or(0) << " bytes\n";
    }
  }
  return 0;
}

} // namespace kiln
