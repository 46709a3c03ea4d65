// The GPU form of the kernel library, shared by every GPU target: the kernel
// descriptions (func.func with the trailing %part/%parts arguments) become
// gpu.func kernels in one gpu.module carrying the target's attribute
// (#nvvm.target, #rocdl.target), where a thread's part is its global index
// (block_id * block_dim + thread_id) and the part count the grid's threads.
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace mlir {
class Attribute;
class MLIRContext;
} // namespace mlir

namespace kiln::kernels {

// Null after diagnostics when the kernels do not verify. The caller has
// loaded the GPU dialect and the dialect of `target` into `context`.
mlir::OwningOpRef<mlir::ModuleOp> buildGpuKernelModule(mlir::MLIRContext &context,
                                                       const std::vector<KernelSpec> &kernels,
                                                       mlir::Attribute target,
                                                       const std::string &targetName);

} // namespace kiln::kernels
