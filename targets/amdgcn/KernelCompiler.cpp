#include "targets/amdgcn/KernelCompiler.h"

#include "targets/common/GpuKernelModule.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/GPUToROCDL/GPUToROCDLPass.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/ROCDL/Target.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/ROCDL/ROCDLToLLVMIRTranslation.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace kiln::amdgcn {
namespace {

bool fail(std::string &error, const std::string &message) {
  error = message;
  return false;
}

// The toolkit folder MLIR's ROCDL serializer expects: amdgcn/bitcode/ with
// the device libraries and llvm/bin/ld.lld, here as links to where Debian
// installs them. Removed when the compile ends.
class ToolkitFolder {
public:
  bool create(const CompileOptions &options, std::string &error) {
    if (!llvm::sys::fs::is_directory(options.deviceLibs))
      return fail(error, "the ROCm device libraries are not at " + options.deviceLibs +
                             " (Debian: rocm-device-libs)");
    if (!llvm::sys::fs::can_execute(options.lld))
      return fail(error, "ld.lld is not at " + options.lld + " (Debian: lld-22)");
    llvm::SmallString<128> dir;
    if (llvm::sys::fs::createUniqueDirectory("kiln-rocm-toolkit", dir))
      return fail(error, "cannot create a temporary toolkit folder");
    root = dir.str().str();
    bool ok = !llvm::sys::fs::create_directories(root + "/amdgcn") &&
              !llvm::sys::fs::create_directories(root + "/llvm/bin") &&
              !llvm::sys::fs::create_link(options.deviceLibs, root + "/amdgcn/bitcode") &&
              !llvm::sys::fs::create_link(options.lld, root + "/llvm/bin/ld.lld");
    return ok || fail(error, "cannot link the ROCm toolkit into " + root);
  }
  ~ToolkitFolder() {
    if (!root.empty())
      llvm::sys::fs::remove_directories(root);
  }
  const std::string &path() const { return root; }

private:
  std::string root;
};

// AMDGPU keeps a thread's stack in the private address space (5); the
// memref lowering allocates in the generic one, which instruction selection
// rejects. Each such alloca moves to address space 5 and is cast back to a
// generic pointer for its users (LLVM's address space inference then folds
// the casts into private loads and stores).
void allocateInPrivateMemory(mlir::ModuleOp module) {
  constexpr unsigned kPrivate = 5;
  llvm::SmallVector<mlir::LLVM::AllocaOp> generic;
  module->walk([&](mlir::LLVM::AllocaOp alloca) {
    if (alloca.getType().getAddressSpace() == 0)
      generic.push_back(alloca);
  });
  for (mlir::LLVM::AllocaOp alloca : generic) {
    mlir::OpBuilder b(alloca);
    auto privatePtr = mlir::LLVM::LLVMPointerType::get(b.getContext(), kPrivate);
    auto moved =
        mlir::LLVM::AllocaOp::create(b, alloca.getLoc(), privatePtr, alloca.getElemType(),
                                     alloca.getArraySize(), alloca.getAlignment().value_or(0));
    auto cast = mlir::LLVM::AddrSpaceCastOp::create(b, alloca.getLoc(), alloca.getType(), moved);
    alloca.replaceAllUsesWith(cast.getResult());
    alloca.erase();
  }
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::gpu::GPUDialect, mlir::ROCDL::ROCDLDialect>();
  mlir::ROCDL::registerROCDLTargetInterfaceExternalModels(registry);
  mlir::registerROCDLDialectTranslation(registry);
  mlir::registerGPUDialectTranslation(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  auto target = mlir::ROCDL::ROCDLTargetAttr::get(&context, options.optLevel, "amdgcn-amd-amdhsa",
                                                  options.chip, options.features, /*abi=*/"600");
  return kernels::buildGpuKernelModule(context, kernels, target, "amdgcn");
}

bool compileHsaco(mlir::MLIRContext &context, const std::vector<kernels::KernelSpec> &kernels,
                  const CompileOptions &options, std::vector<uint8_t> &hsaco, std::string &error) {
  ToolkitFolder toolkit;
  if (!toolkit.create(options, error))
    return false;
  mlir::OwningOpRef<mlir::ModuleOp> module = buildGpuModule(context, kernels, options);
  if (!module)
    return fail(error, "the generated GPU kernels do not verify (see above)");
  mlir::PassManager pm(&context);
  pm.addPass(mlir::createSCFToControlFlowPass());
  mlir::ConvertGpuOpsToROCDLOpsOptions rocdl;
  rocdl.chipset = options.chip;
  rocdl.runtime = mlir::gpu::amd::Runtime::HIP;
  pm.addNestedPass<mlir::gpu::GPUModuleOp>(mlir::createConvertGpuOpsToROCDLOps(rocdl));
  pm.addPass(mlir::createConvertToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(*module)))
    return fail(error, "lowering the GPU kernels to ROCDL failed (see above)");
  allocateInPrivateMemory(*module);
  mlir::PassManager serialize(&context);
  mlir::GpuModuleToBinaryPassOptions binary;
  binary.compilationTarget = "bin";
  binary.toolkitPath = toolkit.path();
  serialize.addPass(mlir::createGpuModuleToBinaryPass(binary));
  if (mlir::failed(serialize.run(*module)))
    return fail(error, "compiling the ROCDL kernels to an AMDGPU code object failed (see above)");
  bool found = false;
  module->walk([&](mlir::gpu::BinaryOp binaryOp) {
    for (mlir::Attribute object : binaryOp.getObjects()) {
      llvm::StringRef bytes = llvm::cast<mlir::gpu::ObjectAttr>(object).getObject();
      hsaco.assign(bytes.begin(), bytes.end());
      found = true;
    }
  });
  return found || fail(error, "gpu-module-to-binary produced no code object");
}

} // namespace kiln::amdgcn
