#include "compiler/artifact/CompileTarget.h"

#include "compiler/artifact/ArtifactWriter.h"
#include "dialects/kiln/KilnAttrs.h"
#include "dialects/plan/PlanOps.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "passes/Passes.h"
#include "runtime/artifact/Artifact.h"
#include "targets/amdgcn/AmdgcnHooks.h"
#include "targets/amdgcn/KernelCompiler.h"
#include "targets/common/KernelModule.h"
#include "targets/nvptx/KernelCompiler.h"
#include "targets/nvptx/NvptxHooks.h"
#include "targets/x86/KernelCompiler.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {

std::unique_ptr<kernels::TargetHooks> hooksFor(const TargetChoice &target) {
  if (target.kind == TargetChoice::Nvptx)
    return std::make_unique<nvptx::NvptxHooks>(*target.gpu, target.fault);
  if (target.kind == TargetChoice::Amdgcn)
    return std::make_unique<amdgcn::AmdgcnHooks>(*target.gpu);
  return std::make_unique<x86::X86Hooks>(target.cpu);
}

namespace {

nvptx::CompileOptions nvptxOptions(const Chip &chip) {
  nvptx::CompileOptions options;
  options.chip = std::string(chip.chip);
  options.features = std::string(chip.features);
  return options;
}

amdgcn::CompileOptions amdgcnOptions(const Chip &chip) {
  amdgcn::CompileOptions options;
  options.chip = std::string(chip.chip);
  options.features = std::string(chip.features);
  return options;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildKernelModule(mlir::MLIRContext &context,
                                                    const std::vector<kernels::KernelSpec> &kernels,
                                                    const TargetChoice &target) {
  if (target.kind == TargetChoice::Nvptx)
    return nvptx::buildGpuModule(context, kernels, nvptxOptions(*target.gpu));
  if (target.kind == TargetChoice::Amdgcn)
    return amdgcn::buildGpuModule(context, kernels, amdgcnOptions(*target.gpu));
  return kernels::parseKernelModule(context, kernels);
}

mlir::FailureOr<kernels::LoweredModel> lowerAndPlan(mlir::ModuleOp graph,
                                                    const kernels::LowerOptions &options,
                                                    const TargetChoice &target) {
  std::unique_ptr<kernels::TargetHooks> hooks = hooksFor(target);
  mlir::FailureOr<kernels::LoweredModel> lowered = kernels::lowerToPlan(graph, options, *hooks);
  if (mlir::failed(lowered))
    return mlir::failure();
  // A kernel's dynamic shared memory must fit the chip's blocks.
  if (target.gpu)
    for (const kernels::KernelSpec &kernel : lowered->kernels)
      if (kernel.sharedBytes > target.gpu->sharedBytes())
        return graph.emitError() << "kernel " << kernel.name << " needs " << kernel.sharedBytes
                                 << " bytes of shared memory; a block on " << target.gpu->target
                                 << " (" << target.gpu->chip << ") has at most "
                                 << target.gpu->sharedBytes() << " (runtime/core/Chips.def)";
  mlir::PassManager pm(graph.getContext());
  pm.addPass(createPlanAssignOffsets());
  if (mlir::failed(pm.run(*lowered->plan)))
    return mlir::failure();
  return lowered;
}

mlir::FailureOr<TargetBuild> buildArtifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           const kernels::LowerOptions &lowerOptions,
                                           const TargetChoice &target, std::string &error,
                                           const StageProgress &stage) {
  mlir::FailureOr<kernels::LoweredModel> lowered = lowerAndPlan(graph, lowerOptions, target);
  if (mlir::failed(lowered)) {
    error = "lowering to the " + target.name() + " plan failed (see above)";
    return mlir::failure();
  }
  if (stage) {
    size_t entries = 0;
    for (auto entry : lowered->plan->getOps<plan::EntryOp>())
      entries += bool(entry);
    stage("plan: " + std::to_string(entries) + " entry points, " +
          std::to_string(lowered->kernels.size()) + " kernels, " +
          std::to_string(lowered->weights.size()) + " weight bindings");
  }
  TargetBuild build{std::move(*lowered), {}, {}};
  ArtifactInfo info;
  mlir::MLIRContext kernelContext;
  if (target.kind == TargetChoice::Nvptx) {
    std::string ptx;
    if (!nvptx::compilePtx(kernelContext, build.model.kernels, nvptxOptions(*target.gpu), ptx,
                           error))
      return mlir::failure();
    build.library.assign(ptx.begin(), ptx.end());
    build.library.push_back(0); // the driver reads a NUL-terminated image
    info.targetKind = ArtifactInfo::Nvptx;
    info.libraryFormat = "ptx";
    info.kernelsWaitForPriorGrid = true; // nvptx/GridDependency.h
  } else if (target.kind == TargetChoice::Amdgcn) {
    if (!amdgcn::compileHsaco(kernelContext, build.model.kernels, amdgcnOptions(*target.gpu),
                              build.library, error))
      return mlir::failure();
    info.targetKind = ArtifactInfo::Amdgcn;
    info.libraryFormat = "hsaco";
  } else {
    x86::CompileOptions options;
    options.cpu = target.cpu;
    if (!x86::compileKernelLibrary(kernelContext, build.model.kernels, options, build.library,
                                   error))
      return mlir::failure();
    info.chip = target.cpu.cpu;
    info.features = target.cpu.features;
  }
  if (target.gpu) {
    info.triple = std::string(target.gpu->triple());
    info.chip = std::string(target.gpu->chip);
  }
  info.memoryBytes = target.memoryBytes;
  info.reserveBytes = target.reserveBytes;
  if (stage)
    stage("kernels: " + std::to_string(build.library.size()) + " bytes of " +
          (target.kind == TargetChoice::Nvptx    ? std::string("PTX")
           : target.kind == TargetChoice::Amdgcn ? std::string("hsaco")
                                                 : std::string("x86 ELF")));
  if (LayoutAttr layout = graphLayout(graph)) {
    info.tp = static_cast<int>(layout.getTp());
    info.ep = static_cast<int>(layout.getEp());
    info.world = static_cast<int>(layout.devices());
  }
  // Sequence parallelism is the prefill_sp entry the SP graph lowered to.
  info.sp = static_cast<bool>(lowerOptions.spGraph);
  info.modelName = config.name;
  const muse_spark::WeightFormat format = graphWeightFormat(graph) == CheckpointFormat::NVFP4
                                              ? muse_spark::WeightFormat::NVFP4
                                              : muse_spark::WeightFormat::BF16;
  info.configJson = muse_spark::checkpointConfigJson(config, format);
  info.weightFormat = format == muse_spark::WeightFormat::NVFP4 ? "nvfp4" : "bf16";
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
