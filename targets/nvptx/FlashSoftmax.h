// The pieces the flash attention kernels (MmaAttention on mma.sync,
// WgmmaAttention on wgmma) share, over scores in the accumulator layout both
// instructions give: a thread (g, t) = (lane / 4, lane % 4) of a 16-row
// slice holds, for each 8 keys j, rows A (g) and B (g + 8) at keys 8 j + 2 t
// and the next, values 4 j .. 4 j + 3 (A, A, B, B).
#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"

namespace kiln::nvptx::flash {

// The sum (or max) over the four threads of a row.
mlir::Value quadReduce(mlir::ImplicitLocOpBuilder &b, mlir::Value v, bool max);

// Two f32 as one i32 of two bf16 (the first in the low half).
mlir::Value packBf16(mlir::ImplicitLocOpBuilder &b, mlir::Value lo, mlir::Value hi);

// The online softmax's step over one key tile: the rows' new maxima from the
// tile's (this thread's `tileMaxA`, `tileMaxB`) and the carried ones, the
// factors alpha that rescale what was carried, and the new sums; each of
// `p` (the tile's scaled scores, log2 units, -inf where masked) becomes its
// probability exp2(p - max). `carried`: max A, max B, sum A, sum B (the
// maxima in log2 units).
//
// `rawScale` set (scale * log2(e), positive): `p` and the tile's maxima are
// the raw scores instead, each probability exp2(fma(score, scale, -max))
// (one fused instruction where scaling then subtracting takes two), and
// every exp2 the approximation that flushes subnormals (one MUFU instruction
// on NVIDIA chips; the exact-subnormal form adds a range test and two
// multiplies around it). What it flushes lies below 2^-126 of the row's
// largest probability.
struct SoftmaxStep {
  mlir::Value maxA, maxB, sumA, sumB, alphaA, alphaB;
};
SoftmaxStep softmaxStep(mlir::ImplicitLocOpBuilder &b, mlir::Value tileMaxA, mlir::Value tileMaxB,
                        mlir::ValueRange carried, llvm::MutableArrayRef<mlir::Value> p,
                        mlir::Value minusInf, mlir::Value zero, mlir::Value rawScale = {});

} // namespace kiln::nvptx::flash
