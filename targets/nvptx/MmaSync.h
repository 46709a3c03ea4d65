// One mma.sync m16n8k16 with bf16 inputs and f32 accumulators, as the
// tensor-core kernels on mma.sync issue it: A as four i32 of bf16 pairs
// (row-major fragment), B as two (column-major), C as four f32.
#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/SmallVector.h"

namespace kiln::nvptx {

// c + A B: the four sums, this thread's (rows g, g + 8; columns 2t, 2t + 1).
llvm::SmallVector<mlir::Value, 4> mmaBf16(mlir::ImplicitLocOpBuilder &b,
                                          llvm::ArrayRef<mlir::Value> a,
                                          llvm::ArrayRef<mlir::Value> bFragment,
                                          llvm::ArrayRef<mlir::Value> c);

} // namespace kiln::nvptx
