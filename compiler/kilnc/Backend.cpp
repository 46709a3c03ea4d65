#include "compiler/kilnc/Backend.h"

#include "dialects/plan/PlanOps.h"
#include "runtime/artifact/Artifact.h"
#include "runtime/artifact/ArtifactMemory.h"
#include "runtime/core/AtomicFile.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <sstream>

namespace kiln {
namespace {

int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "kilnc") << message << "\n";
  return 1;
}

// Outputs go to stdout (text only) or, whole, to the -o file.
int write(const std::string &path, const uint8_t *data, size_t size) {
  if (path == "-") {
    llvm::outs().write(reinterpret_cast<const char *>(data), size);
    return 0;
  }
  try {
    writeFileAtomically(path, data, size);
  } catch (const FileWriteError &error) {
    return fail(error.what());
  }
  return 0;
}

int writeText(const std::string &path, const std::string &text) {
  return write(path, reinterpret_cast<const uint8_t *>(text.data()), text.size());
}

void report(const TargetBuild &build, const TargetChoice &target, const std::string &path) {
  llvm::outs() << "\n"
               << target.name() << " " << target.chip << " artifact " << path << ": "
               << build.artifact.size() << " bytes, " << build.model.kernels.size() << " kernels ("
               << build.library.size() << " bytes of kernel code), " << build.model.weights.size()
               << " weight bindings, " << build.model.kvCaches.size() << " KV caches\n";
  if (target.kind == TargetChoice::X86) {
    x86::GemmFamily family = x86::gemmFamilyFor(target.cpu);
    llvm::outs() << "  cpu " << target.cpu.cpu << ": GEMMs on " << x86::gemmFamilyName(family)
                 << " (" << x86::gemmFamilyInstruction(family) << "); features";
    for (const std::string &feature : target.cpu.features)
      llvm::outs() << " " << feature;
    llvm::outs() << "\n";
  }
  mlir::ModuleOp plan = build.model.plan.get();
  for (auto entry : plan.getOps<plan::EntryOp>()) {
    int64_t launches = 0;
    for (auto &op : entry.getBody().front())
      launches += llvm::isa<plan::LaunchOp>(op);
    llvm::outs() << "  entry " << entry.getSymName() << ": up to " << entry.getMaxTokens()
                 << " tokens, " << launches << " launches, arena "
                 << entry.getArenaBytes().value_or(0) << " bytes\n";
  }
}

} // namespace

int runBackend(mlir::ModuleOp graph, const BackendRequest &request) {
  kernels::LowerOptions lower;
  lower.maxPrefillTokens = request.maxPrefillTokens;
  lower.decodeBatch = request.decodeBatch;
  lower.verifyTokens = request.verifyTokens;
  lower.kvPageTokens = request.kvPageTokens;
  lower.peerExchange = request.peerExchange;
  lower.spGraph = request.spGraph;
  if (request.output == BackendOutput::Plan || request.output == BackendOutput::Kernels) {
    mlir::FailureOr<kernels::LoweredModel> lowered = lowerAndPlan(graph, lower, request.target);
    if (mlir::failed(lowered))
      return fail("lowering to the plan failed (see above)");
    std::string text;
    llvm::raw_string_ostream os(text);
    if (request.output == BackendOutput::Plan) {
      lowered->plan->print(os);
    } else {
      mlir::MLIRContext kernelContext;
      mlir::OwningOpRef<mlir::ModuleOp> kernels =
          buildKernelModule(kernelContext, lowered->kernels, request.target);
      if (!kernels)
        return fail("the generated kernels do not parse or verify (see above)");
      kernels->print(os);
    }
    os << "\n";
    return writeText(request.outputPath, text);
  }

  if (request.outputPath == "-" &&
      !(request.output == BackendOutput::Library && request.target.kind == TargetChoice::Nvptx))
    return fail("an artifact or kernel library is binary: name the file with -o");
  std::string error;
  auto start = std::chrono::steady_clock::now();
  auto stage = [&](const std::string &what) {
    if (!request.progress)
      return;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    llvm::errs() << "kilnc: " << what << " (" << llvm::formatv("{0:F1}", seconds) << " s)\n";
    start = std::chrono::steady_clock::now();
  };
  mlir::FailureOr<TargetBuild> build =
      buildArtifact(graph, *request.config, lower, request.target, error, stage);
  if (mlir::failed(build))
    return fail(error);
  if (request.output == BackendOutput::Library) {
    size_t size = build->library.size();
    if (request.target.kind == TargetChoice::Nvptx && size && build->library.back() == 0)
      --size; // PTX text, without the terminating NUL the driver needs
    return write(request.outputPath, build->library.data(), size);
  }
  // What a rank needs on the device the artifact records (none: not
  // checked); an artifact that cannot fit is not written.
  const ArtifactMemory memory =
      artifactMemory(Artifact::fromBytes(build->artifact, request.outputPath));
  std::optional<uint64_t> device;
  if (memory.plannedDeviceBytes > 0)
    device = memory.plannedDeviceBytes;
  std::ostringstream plan;
  const bool fits = printMemoryPlan(plan, memory, device, memory.plannedReserveBytes);
  const std::string heading =
      "memory per rank" +
      (device ? " (" + llvm::formatv("{0:F2}", double(*device) / double(1ull << 30)).str() +
                    " GiB a device)"
              : std::string()) +
      ":\n";
  if (!fits) {
    llvm::errs() << heading << plan.str();
    return fail("the artifact does not fit its device (see the memory plan above): use more "
                "ranks (--tp/--ep), NVFP4 experts, a smaller --max-prefill-tokens or "
                "--decode-batch, or name the device's memory with --device-memory");
  }
  if (int rc = write(request.outputPath, build->artifact.data(), build->artifact.size()))
    return rc;
  stage("artifact: " + std::to_string(build->artifact.size()) + " bytes written to " +
        request.outputPath);
  if (request.report) {
    report(*build, request.target, request.outputPath);
    llvm::outs() << heading << plan.str();
  }
  return 0;
}

} // namespace kiln
