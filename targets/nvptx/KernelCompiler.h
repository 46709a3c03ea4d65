// NVPTX kernel library: the shared GPU kernel module (GpuKernelModule.h)
// with an #nvvm.target, then gpu/NVVM ▸ LLVM NVPTX ▸ PTX text for the chip.
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::nvptx {

struct CompileOptions {
  // A row of the chip table (runtime/core/Chips.def): "sm_90a", "sm_100",
  // and the LLVM features it needs ("+ptx83": the PTX ISA version).
  std::string chip = "sm_90a";
  std::string features = "+ptx83";
  int optLevel = 3;
  std::string libdevice = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
};

// The kernels as a gpu.module of gpu.func kernels (what --emit=kernels prints
// for nvptx targets); null after diagnostics when the kernels do not verify.
mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options);

// Compiles the kernels into PTX text; false with `error` set on failure.
bool compilePtx(mlir::MLIRContext &context, const std::vector<kernels::KernelSpec> &kernels,
                const CompileOptions &options, std::string &ptx, std::string &error);

} // namespace kiln::nvptx
