// NVFP4 weights decoded to bf16 in registers, for the tensor-core kernels
// (Hopper has no FP4 matrix instructions): the wgmma expert GEMMs' producer
// (WgmmaExperts) and the narrow expert GEMMs of batched decode
// (NarrowExperts) read the same 16 codes a block and its E4M3 scale.
#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"

namespace kiln::nvptx {

// 16 E2M1 codes (`words`, vector<2xi32>, the first code in the low nibble of
// the first byte) times their E4M3 `scale` (i8) times 2^-7, as 16 bf16
// packed two an i32 (vector<8xi32>, element 2i in the low half of word i).
// Exact: every product of an E2M1 value and an E4M3 scale has at most 6
// significant bits, and times 2^-7 it is still a normal bf16.
mlir::Value nvfp4BlockToBf16(mlir::ImplicitLocOpBuilder &b, mlir::Value words, mlir::Value scale);

// What nvfp4BlockToBf16's values fall short by: the kernels fold it into
// the expert's global scale, which multiplies each finished dot product.
// A power of two, so the results are the bits the exact values would give.
constexpr float kNvfp4Bf16Shortfall = 0x1p7f;

} // namespace kiln::nvptx
