#include "targets/nvptx/KernelCompiler.h"

#include "targets/common/KernelModule.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
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

std::string ptxFeatureFor(const std::string &chip) {
  return chip.rfind("sm_10", 0) == 0 || chip.rfind("sm_12", 0) == 0 ? "+ptx86" : "+ptx78";
}

mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options) {
  // The kernel descriptions parse with the same dialects as on x86.
  mlir::OwningOpRef<mlir::ModuleOp> source = kernels::parseKernelModule(context, kernels);
  if (!source)
    return nullptr;
  mlir::DialectRegistry registry;
  registry.insert<mlir::gpu::GPUDialect, mlir::NVVM::NVVMDialect>();
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  mlir::registerNVVMDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();

  mlir::OpBuilder b(&context);
  mlir::Location loc = source->getLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  module->getOperation()->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                                  b.getUnitAttr());
  module->getOperation()->setAttr("kiln.target", b.getStringAttr("nvptx"));
  b.setInsertionPointToEnd(module->getBody());
  llvm::SmallVector<mlir::Attribute> link;
  if (!options.libdevice.empty() && llvm::sys::fs::exists(options.libdevice))
    link.push_back(b.getStringAttr(options.libdevice));
  auto target = mlir::NVVM::NVVMTargetAttr::get(
      &context, options.optLevel, "nvptx64-nvidia-cuda", options.chip,
      options.features.empty() ? ptxFeatureFor(options.chip) : options.features, nullptr,
      link.empty() ? nullptr : b.getArrayAttr(link));
  auto gpuModule = mlir::gpu::GPUModuleOp::create(b, loc, "kernels", b.getArrayAttr({target}));
  b.setInsertionPointToStart(gpuModule.getBody());

  for (mlir::Operation &op : llvm::make_early_inc_range(*source->getBody())) {
    auto func = llvm::dyn_cast<mlir::func::FuncOp>(op);
    if (!func) { // lookup tables and other globals move as they are
      op.moveBefore(gpuModule.getBody(), gpuModule.getBody()->end());
      continue;
    }
    // Every argument but the trailing %part, %parts becomes a kernel argument.
    mlir::FunctionType type = func.getFunctionType();
    unsigned kept = type.getNumInputs() - 2;
    auto kernelType = mlir::FunctionType::get(&context, type.getInputs().take_front(kept), {});
    b.setInsertionPoint(gpuModule.getBody(), gpuModule.getBody()->end());
    // Exported as kiln_<name>, the symbol every target's artifact names.
    auto kernel = mlir::gpu::GPUFuncOp::create(b, func.getLoc(), ("kiln_" + func.getName()).str(),
                                               kernelType);
    kernel->setAttr(mlir::gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    if (mlir::Attribute tiling = func->getAttr("kiln.tiling"))
      kernel->setAttr("kiln.tiling", tiling);
    mlir::Block &entry = kernel.getBody().front();
    b.setInsertionPointToStart(&entry);
    // part = block_id.x * block_dim.x + thread_id.x; parts = grid_dim.x * block_dim.x
    mlir::Value block = mlir::gpu::BlockIdOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value dim = mlir::gpu::BlockDimOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value thread = mlir::gpu::ThreadIdOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value grid = mlir::gpu::GridDimOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value first = mlir::arith::MulIOp::create(b, loc, block, dim);
    mlir::Value part = mlir::arith::AddIOp::create(b, loc, first, thread);
    mlir::Value parts = mlir::arith::MulIOp::create(b, loc, grid, dim);
    mlir::IRMapping map;
    for (unsigned i = 0; i < kept; ++i)
      map.map(func.getArgument(i), entry.getArgument(i));
    map.map(func.getArgument(kept),
            mlir::arith::IndexCastOp::create(b, loc, b.getI64Type(), part).getResult());
    map.map(func.getArgument(kept + 1),
            mlir::arith::IndexCastOp::create(b, loc, b.getI64Type(), parts).getResult());
    for (mlir::Operation &inner : func.getBody().front()) {
      if (llvm::isa<mlir::func::ReturnOp>(inner)) {
        mlir::gpu::ReturnOp::create(b, inner.getLoc());
        continue;
      }
      b.clone(inner, map);
    }
  }
  if (mlir::failed(mlir::verify(*module)))
    return nullptr;
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
