#include "targets/common/GpuKernelModule.h"

#include "targets/common/KernelModule.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"

namespace kiln::kernels {

mlir::OwningOpRef<mlir::ModuleOp> buildGpuKernelModule(mlir::MLIRContext &context,
                                                       const std::vector<KernelSpec> &kernels,
                                                       mlir::Attribute target,
                                                       const std::string &targetName) {
  // The kernel descriptions parse with the same dialects as on x86.
  mlir::OwningOpRef<mlir::ModuleOp> source = parseKernelModule(context, kernels);
  if (!source)
    return nullptr;
  mlir::OpBuilder b(&context);
  mlir::Location loc = source->getLoc();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  module->getOperation()->setAttr(mlir::gpu::GPUDialect::getContainerModuleAttrName(),
                                  b.getUnitAttr());
  module->getOperation()->setAttr("kiln.target", b.getStringAttr(targetName));
  b.setInsertionPointToEnd(module->getBody());
  auto gpuModule = mlir::gpu::GPUModuleOp::create(b, loc, "kernels", b.getArrayAttr({target}));
  b.setInsertionPointToStart(gpuModule.getBody());

  for (mlir::Operation &op : llvm::make_early_inc_range(*source->getBody())) {
    auto func = llvm::dyn_cast<mlir::func::FuncOp>(op);
    if (!func) { // lookup tables and other globals move as they are
      op.moveBefore(gpuModule.getBody(), gpuModule.getBody()->end());
      continue;
    }
    // Every argument but the trailing %part, %parts becomes a kernel argument.
    mlir::FunctionType type = func.getFunctionType();
    unsigned kept = type.getNumInputs() - 2;
    auto kernelType = mlir::FunctionType::get(&context, type.getInputs().take_front(kept), {});
    b.setInsertionPoint(gpuModule.getBody(), gpuModule.getBody()->end());
    // Exported as kiln_<name>, the symbol every target's artifact names.
    auto kernel = mlir::gpu::GPUFuncOp::create(b, func.getLoc(), ("kiln_" + func.getName()).str(),
                                               kernelType);
    kernel->setAttr(mlir::gpu::GPUDialect::getKernelFuncAttrName(), b.getUnitAttr());
    if (mlir::Attribute tiling = func->getAttr("kiln.tiling"))
      kernel->setAttr("kiln.tiling", tiling);
    // What the kernel asks of its launch (nvvm.maxntid, nvvm.minctasm).
    for (mlir::NamedAttribute attr : func->getAttrs())
      if (attr.getName().strref().starts_with("nvvm."))
        kernel->setAttr(attr.getName(), attr.getValue());
    mlir::Block &entry = kernel.getBody().front();
    b.setInsertionPointToStart(&entry);
    // part = block_id.x * block_dim.x + thread_id.x; parts = grid_dim.x * block_dim.x
    mlir::Value block = mlir::gpu::BlockIdOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value dim = mlir::gpu::BlockDimOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value thread = mlir::gpu::ThreadIdOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value grid = mlir::gpu::GridDimOp::create(b, loc, mlir::gpu::Dimension::x);
    mlir::Value first = mlir::arith::MulIOp::create(b, loc, block, dim);
    mlir::Value part = mlir::arith::AddIOp::create(b, loc, first, thread);
    mlir::Value parts = mlir::arith::MulIOp::create(b, loc, grid, dim);
    mlir::IRMapping map;
    for (unsigned i = 0; i < kept; ++i)
      map.map(func.getArgument(i), entry.getArgument(i));
    map.map(func.getArgument(kept),
            mlir::arith::IndexCastOp::create(b, loc, b.getI64Type(), part).getResult());
    map.map(func.getArgument(kept + 1),
            mlir::arith::IndexCastOp::create(b, loc, b.getI64Type(), parts).getResult());
    for (mlir::Operation &inner : func.getBody().front()) {
      if (llvm::isa<mlir::func::ReturnOp>(inner)) {
        mlir::gpu::ReturnOp::create(b, inner.getLoc());
        continue;
      }
      b.clone(inner, map);
    }
  }
  if (mlir::failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

} // namespace kiln::kernels
