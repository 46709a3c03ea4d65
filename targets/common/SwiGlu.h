#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"

namespace kiln::kernels {

// h = silu(g) * u = g / (1 + exp(-g)) * u (f32), in the order the reference
// interpreter computes it; `one` is the f32 constant 1. Every expert
// kernel's SwiGLU epilogue, on every target, builds it here.
mlir::Value swiGlu(mlir::ImplicitLocOpBuilder &b, mlir::Value g, mlir::Value u, mlir::Value one);

} // namespace kiln::kernels
