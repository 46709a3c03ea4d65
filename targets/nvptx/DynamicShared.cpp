#include "targets/nvptx/DynamicShared.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace kiln::nvptx {

using namespace mlir;

void declareDynamicShared(kernels::KernelScope &k, const std::string &name, int64_t alignment) {
  OpBuilder::InsertionGuard guard(k.b);
  k.b.setInsertionPoint(k.func);
  LLVM::GlobalOp::create(k.b, LLVM::LLVMArrayType::get(k.b.getI8Type(), 0),
                         /*isConstant=*/false, LLVM::Linkage::External, name, Attribute(),
                         alignment, /*addrSpace=*/3);
}

} // namespace kiln::nvptx
