#include "targets/nvptx/MmaSync.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace kiln::nvptx {

using namespace mlir;

SmallVector<Value, 4> mmaBf16(ImplicitLocOpBuilder &b, ArrayRef<Value> a, ArrayRef<Value> bFragment,
                              ArrayRef<Value> c) {
  Type f32 = b.getF32Type();
  auto acc = LLVM::LLVMStructType::getLiteral(b.getContext(), {f32, f32, f32, f32});
  Value sum = NVVM::MmaOp::create(
      b, acc, a, bFragment, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
      std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
      std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  SmallVector<Value, 4> out;
  for (int64_t i = 0; i < 4; ++i)
    out.push_back(LLVM::ExtractValueOp::create(b, sum, ArrayRef<int64_t>{i}));
  return out;
}

} // namespace kiln::nvptx
