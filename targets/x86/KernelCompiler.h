// Turns generated kernels into the artifact's kernel library: one MLIR
// module ▸ LLVM dialect ▸ LLVM IR with a `kiln_<name>(void **args)` entry per
// kernel ▸ x86-64 object for one CPU (CpuTarget) ▸ ld.lld -shared ▸ ELF bytes.
#pragma once

#include "targets/common/KernelSpec.h"
#include "targets/x86/CpuTarget.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::x86 {

using kernels::KernelSpec;

struct CompileOptions {
  CpuTarget cpu; // its features are all the code may use (CpuTarget.h)
  int optLevel = 3;
};

// Compiles the kernels into an ELF shared object. Fails with a message (and
// returns false) when MLIR does not verify, a lowering fails, or the linker
// cannot be run.
bool compileKernelLibrary(mlir::MLIRContext &context, const std::vector<KernelSpec> &kernels,
                          const CompileOptions &options, std::vector<uint8_t> &library,
                          std::string &error);

} // namespace kiln::x86
