#include "compiler/artifact/CompileTarget.h"

#include "compiler/artifact/ArtifactWriter.h"
#include "dialects/plan/PlanOps.h"
#include "models/muse_spark/CheckpointSynth.h"
#include "passes/Passes.h"
#include "runtime/artifact/Artifact.h"
#include "targets/amdgcn/AmdgcnHooks.h"
#include "targets/amdgcn/KernelCompiler.h"
#include "targets/nvptx/KernelCompiler.h"
#include "targets/nvptx/NvptxHooks.h"
#include "targets/x86/KernelCompiler.h"
#include "targets/x86/X86Hooks.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

namespace kiln {

std::unique_ptr<kernels::TargetHooks> hooksFor(const TargetChoice &target) {
  if (target.kind == TargetChoice::Nvptx)
    return std::make_unique<nvptx::NvptxHooks>(target.chip, target.fault);
  if (target.kind == TargetChoice::Amdgcn)
    return std::make_unique<amdgcn::AmdgcnHooks>();
  return std::make_unique<x86::X86Hooks>(target.cpu);
}

mlir::FailureOr<kernels::LoweredModel> lowerAndPlan(mlir::ModuleOp graph,
                                                    const kernels::LowerOptions &options,
                                                    const TargetChoice &target) {
  std::unique_ptr<kernels::TargetHooks> hooks = hooksFor(target);
  mlir::FailureOr<kernels::LoweredModel> lowered = kernels::lowerToPlan(graph, options, *hooks);
  if (mlir::failed(lowered))
    return mlir::failure();
  mlir::PassManager pm(graph.getContext());
  pm.addPass(createPlanAssignOffsets());
  if (mlir::failed(pm.run(*lowered->plan)))
    return mlir::failure();
  return lowered;
}

mlir::FailureOr<TargetBuild> buildArtifact(mlir::ModuleOp graph, const muse_spark::Config &config,
                                           muse_spark::WeightFormat format,
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
    nvptx::CompileOptions options;
    options.chip = target.chip;
    std::string ptx;
    if (!nvptx::compilePtx(kernelContext, build.model.kernels, options, ptx, error))
      return mlir::failure();
    build.library.assign(ptx.begin(), ptx.end());
    build.library.push_back(0); // the driver reads a NUL-terminated image
    info.targetKind = ArtifactInfo::Nvptx;
    info.triple = "nvptx64-nvidia-cuda";
    info.chip = target.chip;
    info.libraryFormat = "ptx";
  } else if (target.kind == TargetChoice::Amdgcn) {
    amdgcn::CompileOptions options;
    options.chip = target.chip;
    if (!amdgcn::compileHsaco(kernelContext, build.model.kernels, options, build.library, error))
      return mlir::failure();
    info.targetKind = ArtifactInfo::Amdgcn;
    info.triple = "amdgcn-amd-amdhsa";
    info.chip = target.chip;
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
  if (stage)
    stage("kernels: " + std::to_string(build.library.size()) + " bytes of " +
          (target.kind == TargetChoice::Nvptx    ? std::string("PTX")
           : target.kind == TargetChoice::Amdgcn ? std::string("hsaco")
                                                 : std::string("x86 ELF")));
  if (auto layout = graph->getAttrOfType<mlir::DictionaryAttr>("kiln.layout")) {
    if (auto tp = layout.getAs<mlir::IntegerAttr>("tp"))
      info.tp = static_cast<int>(tp.getInt());
    if (auto ep = layout.getAs<mlir::IntegerAttr>("ep"))
      info.ep = static_cast<int>(ep.getInt());
    info.world = std::max(info.tp, info.ep);
  }
  // Sequence parallelism is the prefill_sp entry the SP graph lowered to.
  info.sp = static_cast<bool>(lowerOptions.spGraph);
  info.modelName = config.name;
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
