#include "targets/x86/KernelCompiler.h"

#include "targets/common/KernelModule.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/LLVMCommon/ConversionTarget.h"
#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/Transforms.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/DialectConversion.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Triple.h"

#include <mutex>
#include <set>

namespace kiln::x86 {
namespace {

constexpr const char *kTriple = "x86_64-unknown-linux-gnu";

void initializeX86() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeX86TargetInfo();
    LLVMInitializeX86Target();
    LLVMInitializeX86TargetMC();
    LLVMInitializeX86AsmPrinter();
  });
}

// kiln_<name>(void **args): unpacks the runtime's argument array (pointers
// to memref descriptors, then pointers to i64 scalars) and calls the
// C-interface wrapper MLIR emitted for the kernel.
void addPackedEntry(llvm::Module &module, const std::string &name) {
  llvm::Function *callee = module.getFunction("_mlir_ciface_" + name);
  llvm::LLVMContext &ctx = module.getContext();
  llvm::Type *ptr = llvm::PointerType::getUnqual(ctx);
  auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false);
  auto *entry =
      llvm::Function::Create(type, llvm::Function::ExternalLinkage, "kiln_" + name, module);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", entry));
  llvm::SmallVector<llvm::Value *> args;
  for (auto [i, param] : llvm::enumerate(callee->args())) {
    llvm::Value *slot = b.CreateConstGEP1_64(ptr, entry->getArg(0), i);
    llvm::Value *pointer = b.CreateLoad(ptr, slot);
    args.push_back(param.getType()->isPointerTy() ? pointer
                                                  : b.CreateLoad(param.getType(), pointer));
  }
  b.CreateCall(callee, args);
  b.CreateRetVoid();
}

// x86vector ops (the AVX-512 BF16 dot products) become the LLVM intrinsics
// they name; everything else is left to the generic conversion to LLVM.
struct LegalizeX86Vector
    : mlir::PassWrapper<LegalizeX86Vector, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LegalizeX86Vector)
  void runOnOperation() override {
    mlir::MLIRContext &context = getContext();
    mlir::LLVMTypeConverter converter(&context);
    mlir::RewritePatternSet patterns(&context);
    mlir::populateX86VectorLegalizeForLLVMExportPatterns(converter, patterns);
    mlir::LLVMConversionTarget target(context);
    mlir::configureX86VectorLegalizeForExportTarget(target);
    target.markUnknownOpDynamicallyLegal([](mlir::Operation *) { return true; });
    if (mlir::failed(mlir::applyPartialConversion(getOperation(), target, std::move(patterns))))
      signalPassFailure();
  }
};

// f32 -> bf16 as integer rounding (to nearest even, NaN kept quiet), for
// CPUs without vcvtneps2bf16: LLVM would call __truncsfbf2, which the
// kernel library does not link.
struct ExpandBf16Truncation
    : mlir::PassWrapper<ExpandBf16Truncation, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(ExpandBf16Truncation)
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    mlir::arith::populateExpandBFloat16Patterns(patterns);
    if (mlir::failed(mlir::applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

bool fail(std::string &error, const std::string &message) {
  error = message;
  return false;
}

} // namespace

bool compileKernelLibrary(mlir::MLIRContext &context, const std::vector<KernelSpec> &kernels,
                          const CompileOptions &options, std::vector<uint8_t> &library,
                          std::string &error) {
  mlir::OwningOpRef<mlir::ModuleOp> module = kernels::parseKernelModule(context, kernels);
  if (!module)
    return fail(error, "the generated kernels do not parse or verify (see above)");

  mlir::PassManager pm(&context);
  pm.addPass(std::make_unique<LegalizeX86Vector>());
  if (!options.cpu.has("avx512bf16"))
    pm.addPass(std::make_unique<ExpandBf16Truncation>());
  pm.addPass(mlir::createSCFToControlFlowPass());
  pm.addPass(mlir::createConvertToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
  if (mlir::failed(pm.run(*module)))
    return fail(error, "lowering the kernels to the LLVM dialect failed (see above)");

  llvm::LLVMContext llvmContext;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(*module, llvmContext);
  if (!llvmModule)
    return fail(error, "translating the kernels to LLVM IR failed");
  std::set<std::string> seen;
  for (const KernelSpec &kernel : kernels)
    if (seen.insert(kernel.name).second)
      addPackedEntry(*llvmModule, kernel.name);
  // The library exports the kiln_<name> entries and nothing else.
  for (llvm::Function &f : *llvmModule)
    if (!f.isDeclaration() && !f.getName().starts_with("kiln_"))
      f.setVisibility(llvm::GlobalValue::HiddenVisibility);

  initializeX86();
  llvm::Triple triple(kTriple);
  std::string lookupError;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, lookupError);
  if (!target)
    return fail(error, "no x86 target in this LLVM: " + lookupError);
  // The x86-64 baseline plus exactly the CPU's listed features, so that the
  // library needs nothing the artifact does not record; the CPU's own name
  // tunes scheduling only.
  std::unique_ptr<llvm::TargetMachine> machine(target->createTargetMachine(
      triple, "x86-64", options.cpu.llvmFeatures(), llvm::TargetOptions(), llvm::Reloc::PIC_,
      std::nullopt, llvm::CodeGenOptLevel::Aggressive));
  for (llvm::Function &f : *llvmModule)
    if (!f.isDeclaration())
      f.addFnAttr("tune-cpu", options.cpu.cpu);
  llvmModule->setDataLayout(machine->createDataLayout());
  llvmModule->setTargetTriple(triple);
  if (llvm::Error err =
          mlir::makeOptimizingTransformer(options.optLevel, 0, machine.get())(llvmModule.get()))
    return fail(error, "optimising the kernels failed: " + llvm::toString(std::move(err)));

  // Object file and linked library in a private temporary directory.
  llvm::SmallString<128> dir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("kiln-kernels", dir))
    return fail(error, "cannot create a temporary directory: " + ec.message());
  std::string object = (dir + "/kernels.o").str(), shared = (dir + "/kernels.so").str();
  auto cleanup = [&] {
    llvm::sys::fs::remove(object);
    llvm::sys::fs::remove(shared);
    llvm::sys::fs::remove(dir);
  };
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(object, ec);
    if (ec) {
      cleanup();
      return fail(error, "cannot write " + object + ": " + ec.message());
    }
    llvm::legacy::PassManager codegen;
    if (machine->addPassesToEmitFile(codegen, out, nullptr, llvm::CodeGenFileType::ObjectFile)) {
      cleanup();
      return fail(error, "the x86 backend cannot emit object files");
    }
    codegen.run(*llvmModule);
  }
  llvm::ErrorOr<std::string> lld = llvm::sys::findProgramByName("ld.lld", {"/usr/lib/llvm-22/bin"});
  if (!lld) {
    cleanup();
    return fail(error, "ld.lld not found (Debian: lld-22)");
  }
  llvm::SmallVector<llvm::StringRef> argv = {*lld,         "-shared", "--build-id=none",  "-o",
                                             shared,       object,    "--hash-style=gnu", "-z",
                                             "noexecstack"};
  std::string linkError;
  int rc = llvm::sys::ExecuteAndWait(*lld, argv, std::nullopt, {}, 0, 0, &linkError);
  if (rc != 0) {
    cleanup();
    return fail(error, "ld.lld failed" + (linkError.empty() ? "" : ": " + linkError));
  }
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> bytes = llvm::MemoryBuffer::getFile(shared);
  if (!bytes) {
    cleanup();
    return fail(error, "cannot read the linked kernel library");
  }
  library.assign((*bytes)->getBufferStart(), (*bytes)->getBufferEnd());
  cleanup();
  return true;
}

} // namespace kiln::x86
