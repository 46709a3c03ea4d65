#include "targets/nvptx/KernelCompiler.h"

#include "targets/common/GpuKernelModule.h"
#include "targets/nvptx/GridDependency.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"

#include "llvm/Support/FileSystem.h"

namespace kiln::nvptx {
namespace {

bool fail(std::string &error, const std::string &message) {
  error = message;
  return false;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::gpu::GPUDialect, mlir::NVVM::NVVMDialect>();
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  mlir::registerNVVMDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  mlir::OpBuilder b(&context);
  llvm::SmallVector<mlir::Attribute> link;
  if (!options.libdevice.empty() && llvm::sys::fs::exists(options.libdevice))
    link.push_back(b.getStringAttr(options.libdevice));
  auto target = mlir::NVVM::NVVMTargetAttr::get(&context, options.optLevel, "nvptx64-nvidia-cuda",
                                                options.chip, options.features, nullptr,
                                                link.empty() ? nullptr : b.getArrayAttr(link));
  mlir::OwningOpRef<mlir::ModuleOp> module =
      kernels::buildGpuKernelModule(context, kernels, target, "nvptx");
  if (module)
    waitForPriorGrid(*module); // every chip of the table is sm_90 or later
  return module;
}

bool compilePtx(mlir::MLIRContext &context, const std::vector<kernels::KernelSpec> &kernels,
                const CompileOptions &options, std::string &ptx, std::string &error) {
  mlir::OwningOpRef<mlir::ModuleOp> module = buildGpuModule(context, kernels, options);
  if (!module)
    return fail(error, "the generated GPU kernels do not verify (see above)");
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createSCFToControlFlowPass());
  pm.addNestedPass<mlir::gpu::GPUModuleOp>(mlir::createConvertGpuOpsToNVVMOps());
  pm.addPass(mlir::createConvertToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  mlir::GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "isa";
  pm.addPass(mlir::createGpuModuleToBinaryPass(binary));
  if (mlir::failed(pm.run(*module)))
    return fail(error, "lowering the GPU kernels to PTX failed (see above)");
  bool found = false;
  module->walk([&](mlir::gpu::BinaryOp binaryOp) {
    for (mlir::Attribute object : binaryOp.getObjects()) {
      ptx = llvm::cast<mlir::gpu::ObjectAttr>(object).getObject().str();
      found = true;
    }
  });
  if (!found)
    return fail(error, "gpu-module-to-binary produced no PTX");
  return true;
}

} // namespace kiln::nvptx
