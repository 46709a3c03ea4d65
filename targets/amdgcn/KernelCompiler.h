// AMDGCN kernel library: the shared GPU kernel module (GpuKernelModule.h)
// with a #rocdl.target, then gpu/ROCDL ▸ LLVM AMDGPU ▸ an AMDGPU code object
// (hsaco: the ELF that hipModuleLoadData takes), linked with ld.lld against
// the ROCm device libraries (ocml/ockl bitcode).
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::amdgcn {

struct CompileOptions {
  // A row of the chip table (runtime/core/Chips.def) and its LLVM features.
  std::string chip = "gfx942";
  std::string features;
  int optLevel = 3;
  // Debian's rocm-device-libs and LLVM 22's linker; MLIR looks for them
  // under one toolkit folder, which the compiler assembles from links.
  std::string deviceLibs = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";
  std::string lld = "/usr/lib/llvm-22/bin/ld.lld";
};

// The kernels as a gpu.module of gpu.func kernels (what --emit=kernels
// prints for amdgcn targets); null after diagnostics when they do not verify.
mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options);

// Compiles the kernels into a code object; false with `error` set on failure
// (a missing device library or linker is named).
bool compileHsaco(mlir::MLIRContext &context, const std::vector<kernels::KernelSpec> &kernels,
                  const CompileOptions &options, std::vector<uint8_t> &hsaco, std::string &error);

} // namespace kiln::amdgcn
