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
  std::string chip = "sm_90"; // sm_90 (H100/H200), sm_100 (B200/B300)
  std::string features;       // empty: the PTX ISA the chip needs
  int optLevel = 3;
  std::string libdevice = "/usr/local/cuda/nvvm/libdevice/libdevice.10.bc";
};

// The PTX ISA feature a chip needs ("+ptx78" for sm_90, "+ptx86" for sm_100).
std::string ptxFeatureFor(const std::string &chip);

// The kernels as a gpu.module of gpu.func kernels (what --emit=kernels prints
// for nvptx targets); null after diagnostics when the kernels do not verify.
mlir::OwningOpRef<mlir::ModuleOp> buildGpuModule(mlir::MLIRContext &context,
                                                 const std::vector<kernels::KernelSpec> &kernels,
                                                 const CompileOptions &options);

// Compiles the kernels into PTX text; false with `error` set on failure.
bool compilePtx(mlir::MLIRContext &context, const std::vector<kernels::KernelSpec> &kernels,
                const CompileOptions &options, std::string &ptx, std::string &error);

} // namespace kiln::nvptx
