#include "passes/Sharding.h"

#include "dialects/kiln/KilnOps.h"

#include "mlir/IR/SymbolTable.h"

using namespace mlir;

namespace kiln::sharding {

shard::GridOp getOrCreateGrid(ModuleOp module, StringRef name, ArrayRef<int64_t> shape) {
  if (auto grid = module.lookupSymbol<shard::GridOp>(name))
    return grid;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  return shard::GridOp::create(b, module.getLoc(), b.getStringAttr(name),
                               b.getDenseI64ArrayAttr(shape));
}

RankedTensorType withDimDividedBy(Value v, int64_t dim, int64_t parts) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  if (!ShapedType::isDynamic(shape[dim]))
    shape[dim] /= parts;
  return RankedTensorType::get(shape, type.getElementType());
}

static int64_t groupSize(shard::GridOp grid, ArrayRef<shard::GridAxis> axes) {
  int64_t size = 1;
  for (shard::GridAxis axis : axes)
    size *= grid.getShape()[axis];
  return size;
}

Value sliceAlong(OpBuilder &b, Value v, int64_t dim, shard::GridOp grid,
                 ArrayRef<shard::GridAxis> axes) {
  int64_t parts = groupSize(grid, axes);
  if (parts == 1)
    return v;
  auto dequant = v.getDefiningOp<Nvfp4DequantOp>();
  if (dequant && dim == 0 && llvm::cast<RankedTensorType>(v.getType()).getRank() >= 3 &&
      v.hasOneUse()) {
    // A stack of NVFP4 experts: slice packed values, scales and global scales.
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(dequant);
    for (OpOperand &operand : dequant->getOpOperands())
      operand.set(sliceAlong(b, operand.get(), 0, grid, axes));
    dequant.getResult().setType(withDimDividedBy(v, 0, parts));
    return dequant.getResult();
  }
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointAfterValue(v);
  return shard::AllSliceOp::create(b, v.getLoc(), withDimDividedBy(v, dim, parts),
                                   grid.getSymName(), axes, v, llvm::APInt(64, dim));
}

Value allReduce(OpBuilder &b, Location loc, Value v, StringRef grid,
                ArrayRef<shard::GridAxis> axes) {
  return shard::AllReduceOp::create(b, loc, v, grid, axes, shard::ReductionKind::Sum);
}

Value allGather(OpBuilder &b, Location loc, Value v, StringRef grid, ArrayRef<shard::GridAxis> axes,
                int64_t dim, int64_t parts) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  SmallVector<int64_t> shape(type.getShape());
  if (!ShapedType::isDynamic(shape[dim]))
    shape[dim] *= parts;
  return shard::AllGatherOp::create(b, loc, RankedTensorType::get(shape, type.getElementType()),
                                    FlatSymbolRefAttr::get(b.getContext(), grid),
                                    b.getDenseI16ArrayAttr(axes), v, b.getIndexAttr(dim));
}

Value reduceScatter(OpBuilder &b, Location loc, Value v, StringRef grid,
                    ArrayRef<shard::GridAxis> axes, int64_t dim, int64_t parts) {
  return shard::ReduceScatterOp::create(
      b, loc, withDimDividedBy(v, dim, parts), FlatSymbolRefAttr::get(b.getContext(), grid),
      b.getDenseI16ArrayAttr(axes), v,
      shard::ReductionKindAttr::get(b.getContext(), shard::ReductionKind::Sum),
      b.getIndexAttr(dim));
}

} // namespace kiln::sharding
