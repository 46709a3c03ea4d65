// Helpers the sharding passes share: the device grids Kiln's layouts use and
// the shard-dialect ops they insert. A layout of TP and EP over
// max(TP, EP) devices uses two grids over the same devices:
//   @tp : (W/TP) x (TP/R) x R   attention; R = how many ranks share a KV head
//   @ep : (W/EP) x EP           experts
// so that a TP group is grid_axes [1, 2] of @tp, the ranks holding distinct KV
// heads are grid_axes [1], and an EP group is grid_axes [1] of @ep.
#pragma once

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <cstdint>

namespace kiln::sharding {

inline constexpr llvm::StringLiteral kTpGrid = "tp";
inline constexpr llvm::StringLiteral kEpGrid = "ep";

// The grid `name` of `module`, created at its top with `shape` if absent.
mlir::shard::GridOp getOrCreateGrid(mlir::ModuleOp module, llvm::StringRef name,
                                    llvm::ArrayRef<int64_t> shape);

// `v` with dimension `dim` split into equal pieces over the group of `grid`
// along `axes`, this rank keeping its own piece (shard.all_slice, no
// communication). An expert stack dequantised by kiln.nvfp4_dequant is sliced
// before the dequantisation, so each rank decodes only its experts.
mlir::Value sliceAlong(mlir::OpBuilder &b, mlir::Value v, int64_t dim, mlir::shard::GridOp grid,
                       llvm::ArrayRef<mlir::shard::GridAxis> axes);

// `v` with dimension `dim` divided by `parts`.
mlir::RankedTensorType withDimDividedBy(mlir::Value v, int64_t dim, int64_t parts);

// shard.all_reduce (sum), all_gather and reduce_scatter (sum) of `v` over the
// group of `grid` along `axes`.
mlir::Value allReduce(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, llvm::StringRef grid,
                      llvm::ArrayRef<mlir::shard::GridAxis> axes);
mlir::Value allGather(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v, llvm::StringRef grid,
                      llvm::ArrayRef<mlir::shard::GridAxis> axes, int64_t dim, int64_t parts);
mlir::Value reduceScatter(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                          llvm::StringRef grid, llvm::ArrayRef<mlir::shard::GridAxis> axes,
                          int64_t dim, int64_t parts);

} // namespace kiln::sharding
