// The kernel descriptions of a plan as one MLIR module: its text, and the
// parsed, verified module with every dialect kernels use registered.
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace kiln::kernels {

// The kernels' MLIR as one module text (duplicates by name dropped), in order.
std::string kernelModuleText(const std::vector<KernelSpec> &kernels);

// Parses and verifies the kernels' module in `context`; null after printing
// diagnostics when it fails.
mlir::OwningOpRef<mlir::ModuleOp> parseKernelModule(mlir::MLIRContext &context,
                                                    const std::vector<KernelSpec> &kernels);

} // namespace kiln::kernels
