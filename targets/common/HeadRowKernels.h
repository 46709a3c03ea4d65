// Kernels over the head rows of a [tokens, heads, head_dim] tensor, composed
// from row stages. A stage is one graph op's arithmetic on the row of one
// (token, head) as its holder keeps it in registers (a thread on a CPU, the
// lanes of a warp on a GPU); the skeleton loads the row, runs the stages in
// order and stores it. A fused op of a chain of such ops gets its kernel by
// listing its ops' stages: kiln.head_norm_rope is {headNormStage, ropeStage},
// with no kernel text of its own. Built as typed IR (KernelBuilder.h).
//
// Kernel arguments: (x, each stage's arguments in order, y, rows; part, parts)
// with x and y memref<?xHxDxf32>.
#pragma once

#include "targets/common/KernelSpec.h"

#include "mlir/IR/Value.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlir {
class Builder;
class ImplicitLocOpBuilder;
} // namespace mlir

namespace kiln::kernels {

struct KernelScope;

// The part of one (token, head) row a holder keeps: chunk i is the f32
// vectors lo[i] of elements at[i] .. at[i] + width and hi[i] of the same
// elements plus D/2, so rotate-half's partners sit together.
struct HeadRow {
  std::vector<mlir::Value> at, lo, hi;
};

// What a stage may ask of the skeleton it runs in.
struct HeadRowScope {
  KernelScope &kernel; // for the module's constants
  mlir::ImplicitLocOpBuilder &b;
  int64_t headDim;
  int64_t width;     // elements of a chunk
  mlir::Value token; // the row's token (index)
  // The sum of an f32 over the row's holders (a warp's lanes, or the thread).
  std::function<mlir::Value(mlir::Value)> rowSum;
};

struct HeadRowStage {
  std::string label; // in the kernel's name: "norm_eps1000", "rope_theta10000000"
  // The stage's own kernel arguments, in order.
  std::function<std::vector<mlir::Type>(mlir::Builder &)> args;
  // Rewrites `row` in place; `args` are the stage's arguments.
  std::function<void(HeadRowScope &, const std::vector<mlir::Value> &args, HeadRow &row)> apply;
};

// kiln.head_norm: RMSNorm over the head's D values with a bf16 weight [D]
// (argument memref<Dxbf16>).
HeadRowStage headNormStage(int64_t headDim, double eps);
// kiln.rope: NeoX rotate-half by the token's position, the angle
// pos * theta^(-2j/D) in f64 as the other rope kernels take it (argument
// memref<?xi32>, the token positions); the D/2 frequencies theta^(-2j/D)
// are a constant table computed here (std::pow, as the interpreter's), not
// a pow for every element of every head.
HeadRowStage ropeStage(int64_t headDim, double theta);

// `op`'s kernel from `stages`: a launch part per token, its heads in turn
// (every target; the work is one part a token).
KernelSpec headRowThreads(const std::string &op, int64_t heads, int64_t headDim,
                          const std::vector<HeadRowStage> &stages);
// The same as a warp per (token, head) (GPU targets; the work is 32 threads
// a head a token); head_dim even.
KernelSpec headRowWarp(const std::string &op, int64_t heads, int64_t headDim,
                       const std::vector<HeadRowStage> &stages);

} // namespace kiln::kernels
