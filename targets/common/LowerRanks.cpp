// The lowering of what spans ranks: the shard dialect's ops (weight slices
// and collectives), sequence parallelism's token collectives, and the comm
// groups they name (docs/multi-gpu.md).
#include "targets/common/Lowering.h"

#include "targets/common/Generators.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/TypeSwitch.h"

namespace kiln::kernels::lowering {

FailureOr<int64_t> Lowering::commGroup(Operation *user, FlatSymbolRefAttr gridName,
                                       ArrayRef<int16_t> axes) {
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(user, gridName);
  if (!grid)
    return user->emitOpError() << "names no shard.grid " << gridName;
  std::vector<int64_t> shape(grid.getShape().begin(), grid.getShape().end());
  int64_t devices = 1;
  for (int64_t d : shape)
    devices *= d;
  if (llvm::any_of(shape, [](int64_t d) { return d <= 0; }) || devices != world)
    return user->emitOpError() << "runs on grid " << gridName << " of " << devices
                               << " devices; the plan is for " << world << " ranks";
  std::vector<int64_t> along(axes.begin(), axes.end());
  for (int64_t a : along)
    if (a < 0 || a >= static_cast<int64_t>(shape.size()))
      return user->emitOpError() << "names axis " << a << " of grid " << gridName;
  return groups.add(partitionGrid(gridName.getValue().str(), shape, along));
}

Buf Lowering::collective(StringRef kind, const Buf &source, ArrayRef<plan::DimAttr> shape,
                         int64_t group, int64_t axis, StringRef what) {
  Buf out = allocShape(shape, source.elem);
  plan::CollectiveOp::create(b, loc, b.getStringAttr(kind), source.value, out.value,
                             b.getI64IntegerAttr(group), b.getI64IntegerAttr(axis),
                             b.getStringAttr(what));
  return out;
}

Buf Lowering::tokenCollective(StringRef kind, const Buf &in, int64_t fromScale, int64_t toScale,
                              int64_t group, StringRef what) {
  SmallVector<plan::DimAttr> from = in.shape, to = in.shape, padded = in.shape;
  from[0] = exactRows(fromScale);
  to[0] = exactRows(toScale);
  rowScale = toScale;
  padded[0] = rows();
  Buf out = allocShape(padded, in.elem);
  plan::CollectiveOp::create(b, loc, b.getStringAttr(kind), view(in, from).value,
                             view(out, to).value, b.getI64IntegerAttr(group),
                             b.getI64IntegerAttr(0), b.getStringAttr(what));
  return out;
}

Buf Lowering::gatherTokens(const Buf &in, int64_t group, StringRef what) {
  return tokenCollective("all_gather", in, 1, entrySplit, group, what);
}

Buf Lowering::scatterTokens(const Buf &in, int64_t group, StringRef what) {
  return tokenCollective("reduce_scatter", in, entrySplit, 1, group, what);
}

LogicalResult Lowering::lowerShardOp(Operation *op, StringRef what) {
  auto width = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape().back(); };
  Type f32 = b.getF32Type();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](shard::AllSliceOp o) -> LogicalResult {
        if (o.getInput().getDefiningOp<WeightOp>())
          return success(); // bound where used
        // Sequence parallelism: this rank's rows of the whole sequence.
        if (entrySplit == 1 || o.getSliceAxis() != 0 || rowScale != entrySplit)
          return o.emitOpError() << "slices an activation other than by tokens in a "
                                    "sequence-parallel entry";
        FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), o.getGridAxes());
        if (failed(group))
          return failure();
        int64_t n = width(o.getInput());
        rowScale = 1;
        Buf y = alloc({n}, f32);
        launch(sliceRows(n), {act(o.getInput()), y},
               {"tokens:0", "group:" + std::to_string(*group), "part", "parts"}, Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](shard::AllReduceOp o) -> LogicalResult {
        if (o.getReduction() != shard::ReductionKind::Sum)
          return o.emitOpError() << "reduces with "
                                 << shard::stringifyReductionKind(o.getReduction())
                                 << ": targets all-reduce by sum";
        FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), o.getGridAxes());
        if (failed(group))
          return failure();
        const Buf &in = act(o.getInput());
        values[o.getResult()] = collective("all_reduce", in, in.shape, *group, 0, what);
        return success();
      })
      .Case([&](shard::AllGatherOp o) -> LogicalResult {
        auto out = llvm::cast<RankedTensorType>(o.getResult().getType());
        int64_t axis = o.getGatherAxis().getSExtValue();
        FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), o.getGridAxes());
        if (failed(group))
          return failure();
        const Buf &in = act(o.getInput());
        if (axis == 0) {
          if (entrySplit == 1 || rowScale != 1)
            return o.emitOpError() << "gathers tokens outside a sequence-parallel entry";
          values[o.getResult()] = gatherTokens(in, *group, what);
          return success();
        }
        SmallVector<plan::DimAttr> shape = in.shape;
        shape[axis] = fixed(out.getDimSize(axis));
        values[o.getResult()] = collective("all_gather", in, shape, *group, axis, what);
        return success();
      })
      .Case([&](shard::ReduceScatterOp o) -> LogicalResult {
        // Sequence parallelism: the sum of the whole sequence, each rank
        // keeping its T rows.
        if (entrySplit == 1 || o.getScatterAxis() != 0 || rowScale != entrySplit)
          return o.emitOpError() << "scatters other than tokens, or outside a sequence-parallel "
                                    "entry";
        FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), o.getGridAxes());
        if (failed(group))
          return failure();
        values[o.getResult()] = scatterTokens(act(o.getInput()), *group, what);
        return success();
      })
      .Case([&](LocalExpertsOp o) -> LogicalResult {
        return o.emitOpError() << "feeds the unfused expert kernels, which do not skip other "
                                  "ranks' experts: compile expert parallelism with fusion "
                                  "(without --no-fuse)";
      });
}

} // namespace kiln::kernels::lowering
