// The batch-1 NVFP4 expert products in packed f16 pairs, for targets that
// convert two E4M3 bytes to an f16 pair in one instruction (NVPTX:
// cvt.rn.f16x2.e4m3x2).
//
// The f32 staged dot (WarpDot.h, Nvfp4Lanes::StagedVector) spends about 165
// warp instructions on each row's 576 bytes of a chunk: every code is
// decoded with shifts and masks, widened to f32 and multiplied alone, so on
// the H200 it issues instructions at the SM's limit and reads at under half
// of DRAM's rate. Here an E2M1 code s e1 e0 m is rewritten as the E4M3 byte
// s << 7 | e1 e0 m << 2, whose value is the code's times 2^-6 exactly (e = 0
// is an E4M3 subnormal, as it is an E2M1 one): four such bytes come from a
// word of eight codes in three or four integer operations, a target
// instruction converts each byte pair to an f16 pair, and one packed fma
// multiplies a pair by two vector elements. A lane's 16 codes under one block
// scale are summed in f16 (eight fused products in each half of an f16
// pair), then in f32 times the block scale.
//
// Numerics: the vector is rounded to f16 (11 significant bits, against the
// bf16 the tensor-core kernels use), saturated at f16's largest magnitude
// (65504: an activation past it is clipped, not made infinite); the products
// and their eight-term sums are f16 at 2^-6 of their value, so no element f16
// holds can overflow them.
#pragma once

#include "targets/common/Generators.h"

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace kiln::kernels {
struct WarpOfPart;
} // namespace kiln::kernels

namespace kiln::kernels::warp {

struct Row;

// Copies x[xAt, :] (`k` f32, k % 1024 == 0) into `staged`, a rank-1
// shared-memory memref of k f16, saturated at +-65504 and rounded to f16, in
// the order packedStagedDot reads it: lane l's word m of chunk c (elements
// 1024 c + 32 l + 8 m + i, i = 0 .. 7) as 8 f16 at 1024 c + 256 m + 8 l, in
// the order of the word's f16 pairs: codes 0 2 4 6 1 3 5 7. Thread `thread`
// of `threads` copies every threads-th word; the caller synchronises the
// block before the dots read it.
void stageVectorInPairOrder(mlir::ImplicitLocOpBuilder &b, mlir::Value x, mlir::ValueRange xAt,
                            int64_t k, mlir::Value staged, mlir::Value thread, int64_t threads);

// This lane's part of each NVFP4 row's dot with the staged vector (the first
// `k` elements, k % 1024 == 0; lane l takes elements 32 l .. 32 l + 31 of
// each 1024-element chunk, one 16-byte load of codes and one 2-byte load of
// scales a row), times the row's global scale: one f32 a row, to be summed
// over the warp (warpSums). The rows share each load of the vector.
llvm::SmallVector<mlir::Value> packedStagedDot(mlir::ImplicitLocOpBuilder &b,
                                               const WarpOfPart &warp, llvm::ArrayRef<Row> rows,
                                               mlir::Value staged, int64_t k,
                                               const kernels::E4m3PairToF16 &toF16);

} // namespace kiln::kernels::warp
