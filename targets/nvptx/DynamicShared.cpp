#include "targets/nvptx/DynamicShared.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kiln::nvptx {

using namespace mlir;

void declareDynamicShared(kernels::KernelScope &k, const std::string &name, int64_t alignment,
                          int64_t threads) {
  {
    OpBuilder::InsertionGuard guard(k.b);
    k.b.setInsertionPoint(k.func);
    LLVM::GlobalOp::create(k.b, LLVM::LLVMArrayType::get(k.b.getI8Type(), 0),
                           /*isConstant=*/false, LLVM::Linkage::External, name, Attribute(),
                           alignment, /*addrSpace=*/3);
  }
  k.func->setAttr("nvvm.maxntid", k.b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
}

} // namespace kiln::nvptx
