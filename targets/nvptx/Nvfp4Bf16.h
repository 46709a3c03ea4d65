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

// The NVFP4 global scale of `expert` (`globals`, f32 [E]) times the 2^7 that
// nvfp4BlockToBf16's values fall short by: what multiplies each finished dot
// product of them. A power of two, so the results are the bits the exact
// values would give.
mlir::Value decodedGlobalScale(mlir::ImplicitLocOpBuilder &b, mlir::Value globals,
                               mlir::Value expert);

} // namespace kiln::nvptx
