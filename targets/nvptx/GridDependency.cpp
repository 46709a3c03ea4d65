#include "targets/nvptx/GridDependency.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln::nvptx {

void waitForPriorGrid(mlir::ModuleOp module) {
  module.walk([](mlir::gpu::GPUFuncOp kernel) {
    if (!kernel.isKernel() || kernel.getBody().empty())
      return;
    mlir::OpBuilder b = mlir::OpBuilder::atBlockBegin(&kernel.getBody().front());
    // Nothing of the kernel reads or writes memory before the wait: the
    // grid before it may still be writing what this one reads, or reading
    // what it writes. The trigger after it lets the next grid's blocks take
    // the SMs this grid's finished blocks leave; they wait in turn.
    mlir::NVVM::GriddepcontrolOp::create(b, kernel.getLoc(), mlir::NVVM::GridDepActionKind::wait);
    mlir::NVVM::GriddepcontrolOp::create(b, kernel.getLoc(),
                                         mlir::NVVM::GridDepActionKind::launch_dependents);
  });
}

} // namespace kiln::nvptx
