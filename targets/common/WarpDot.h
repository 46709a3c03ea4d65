// Typed IR pieces the GPU warp kernels share (KernelBuilder.h): the
// butterfly sum across a warp, and the product of weight rows (bf16, or NVFP4
// decoded in registers) with f32 vectors, each lane covering its own 16-byte
// slices of a row so that a warp's loads are contiguous.
#pragma once

#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/Value.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace kiln::kernels {
struct ExpertProjection;
struct WarpOfPart;
} // namespace kiln::kernels

namespace kiln::kernels::warp {

constexpr int64_t kWarp = 32;

// The indices `lead` then `last` (a row's leading indices and a column).
llvm::SmallVector<mlir::Value, 2> concat(mlir::ValueRange lead, mlir::Value last);

// f32 `value` summed over the 32 lanes of a warp (xor shuffles, offsets
// 1, 2, .. 16); every lane holds the sum.
mlir::Value warpSum(mlir::ImplicitLocOpBuilder &b, mlir::Value value);

// One weight row of a multi-row dot: its memref and the row's leading
// indices. NVFP4 rows also name their E4M3 block scales (same leading
// indices) and their f32 global scale.
struct Row {
  mlir::Value w;
  llvm::SmallVector<mlir::Value, 2> at;
  mlir::Value scales, global;
  // The row of the vector this product reads, if not the dot's shared one
  // (a token of several: one weight row against several vectors).
  llvm::SmallVector<mlir::Value, 2> xAt = {};
};

// Lane layouts of an NVFP4 chunk (512 code bytes, 1024 elements).
// Contiguous: lane l takes elements 32 l .. 32 l + 31, one 16-byte load of
// codes and one of scales, but each of a warp's 8 loads of the vector then
// spans 32 cache lines. Grouped: lane l takes 8 groups of 4 elements, group m
// at 128 m + 4 l, so each load of the vector is 512 contiguous bytes across
// the warp, at the price of 8 two-byte loads of codes and 8 of scales a row.
// Grouped pays where few weight rows share each vector (a warp over several
// tokens' vectors: GroupedExperts.h); Contiguous where many rows share one.
// StagedVector: codes and scales as Contiguous, the vector read from a copy
// in shared memory in the order the lanes read it (stageVectorInLaneOrder),
// so that each load of it is 512 contiguous bytes across the warp.
enum class Nvfp4Lanes { Contiguous, Grouped, StagedVector };

// This lane's part of the dot of each row with the f32 vector `x`[xAt, :]
// (`k` wide): one f32 per row, to be summed over the warp (warpSum). The rows
// share the vector's loads, so a warp reads it once for all of them. BF16:
// needs k % 8 == 0 (lane l covers elements 256 c + 8 l .. +8); NVFP4: needs
// k % 32 == 0, lanes as `lanes` says (Grouped where k % 1024 == 0, else
// Contiguous; StagedVector needs k % 1024 == 0, `x` the staged copy and
// `xAt` empty). With `offset` (an index; not with StagedVector), the dot
// covers columns offset .. offset + k of longer rows, in whole chunks.
// `warp` gives the lane and the index constants 0 and 1.
llvm::SmallVector<mlir::Value> rowsDot(mlir::ImplicitLocOpBuilder &b, const WarpOfPart &warp,
                                       llvm::ArrayRef<Row> rows, bool nvfp4, mlir::Value x,
                                       mlir::ValueRange xAt, int64_t k,
                                       mlir::Value offset = mlir::Value(),
                                       Nvfp4Lanes lanes = Nvfp4Lanes::Contiguous);

// Copies the vector `x`[xAt, :] (`k` f32, k % 1024 == 0) into `staged`, a
// rank-1 shared-memory memref, `word` elements at a time (word divides 32):
// lane l's word m of each 1024-element chunk (elements 1024 c + 32 l +
// word m ..) to 1024 c + 32 word m + word l, as `asStaged` makes the word's
// f32 (a vector of `word`) into what `staged` holds of it (16 bytes). Thread
// `thread` of `threads` copies every threads-th word; the caller synchronises
// the block before the dots read it.
void stageVectorByWords(mlir::ImplicitLocOpBuilder &b, mlir::Value x, mlir::ValueRange xAt,
                        int64_t k, mlir::Value staged, mlir::Value thread, int64_t threads,
                        int64_t word, llvm::function_ref<mlir::Value(mlir::Value)> asStaged);

// Copies the vector `x`[xAt, :] (`k` f32, k % 1024 == 0) into `staged`, a
// rank-1 shared-memory memref of k f32, in the order the lanes of an
// Nvfp4Lanes::StagedVector dot read it: element 32 l + 4 m + i of each
// 1024-element chunk (lane l's word m) at 128 m + 4 l + i. Thread `thread`
// of `threads` copies every threads-th group of 4; the caller synchronises
// the block before the dots read it.
void stageVectorInLaneOrder(mlir::ImplicitLocOpBuilder &b, mlir::Value x, mlir::ValueRange xAt,
                            int64_t k, mlir::Value staged, mlir::Value thread, int64_t threads);

// Row (e, o) of `projection` for each o of `outRows`, with the global scale
// `global` (NVFP4; ExpertProjection::loadGlobal).
llvm::SmallVector<Row> projectionRows(const ExpertProjection &projection, mlir::Value e,
                                      llvm::ArrayRef<mlir::Value> outRows, mlir::Value global);

// warpSum of each value, in order.
llvm::SmallVector<mlir::Value> warpSums(mlir::ImplicitLocOpBuilder &b, mlir::ValueRange values);

// An expert-stage item of a warp: token t, selected expert j, the group of
// output rows of that choice and its rows o0, o1, ...
struct WarpItem {
  mlir::Value t, j, group;
  llvm::SmallVector<mlir::Value, 4> o;
};
// The loop over `items` expert-stage items, a warp each (warp, warp +
// warps, ...): `perToken` items a token, `groups` row groups a choice;
// `rowSteps`[r] is the index constant r for r = 1 .. rows a warp, and
// rowSteps.back() (= rows a warp) the group's stride. Leaves the builder
// inside the loop.
WarpItem warpItemLoop(mlir::ImplicitLocOpBuilder &b, const WarpOfPart &warp, mlir::Value items,
                      mlir::Value perToken, mlir::Value groups,
                      llvm::ArrayRef<mlir::Value> rowSteps);

} // namespace kiln::kernels::warp
