#include "targets/common/KernelModule.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"

#include <set>

namespace kiln::kernels {

std::string kernelModuleText(const std::vector<KernelSpec> &kernels) {
  std::string text = "module {\n";
  std::set<std::string> seen;
  for (const KernelSpec &kernel : kernels)
    if (seen.insert(kernel.name).second)
      text += kernel.mlir;
  return text + "}\n";
}

mlir::OwningOpRef<mlir::ModuleOp> parseKernelModule(mlir::MLIRContext &context,
                                                    const std::vector<KernelSpec> &kernels) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::amx::AMXDialect, mlir::arith::ArithDialect, mlir::cf::ControlFlowDialect,
                  mlir::func::FuncDialect, mlir::LLVM::LLVMDialect, mlir::math::MathDialect,
                  mlir::memref::MemRefDialect, mlir::scf::SCFDialect, mlir::vector::VectorDialect,
                  mlir::x86vector::X86VectorDialect>();
  mlir::registerAllExtensions(registry); // the dialects' ConvertToLLVM interfaces
  mlir::registerBuiltinDialectTranslation(registry);
  mlir::registerLLVMDialectTranslation(registry);
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(kernelModuleText(kernels), &context);
  if (!module || mlir::failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

} // namespace kiln::kernels
