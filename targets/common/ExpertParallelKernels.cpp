// The kernels of work split over ranks whose part depends on the rank, known
// only at run time (its index in a comm group arrives as the launch's group:N
// scalar): expert parallelism's renumbering of a token's selected experts to
// this rank's block (kiln.local_experts, and the first step of a kiln.megamoe
// that spans ranks), and sequence parallelism's rows of the whole sequence.
// Built as typed IR (KernelBuilder.h): a launch part's rows, then each row.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

// Arguments: in, out, rows (i64), member (i64); then part, parts.
std::vector<Type> rowKernelArgs(Builder &b, Type elem, int64_t width) {
  Type rows = MemRefType::get({ShapedType::kDynamic, width}, elem);
  return {rows, rows, b.getI64Type(), b.getI64Type()};
}

} // namespace

KernelSpec localExperts(int64_t k, int64_t localCount) {
  std::string name = "local_experts_top" + std::to_string(k) + "_of" + std::to_string(localCount);
  Tiling tiling;
  tiling.set("kind", "rows");
  return buildKernel(
      name, "kiln.local_experts", tiling,
      [&](Builder &b) { return rowKernelArgs(b, b.getI32Type(), k); },
      [&](KernelScope &s) {
        ImplicitLocOpBuilder &b = s.b;
        Value c0 = s.index(0), c1 = s.index(1), choices = s.index(k);
        Value block = s.i32(localCount), none = s.i32(-1);
        Value rows = s.argIndex(2);
        Value first =
            arith::MulIOp::create(b, arith::TruncIOp::create(b, b.getI32Type(), s.arg(3)), block);
        Value t = forEachRowOfPart(s, rows);
        auto choice = scf::ForOp::create(b, c0, choices, c1);
        b.setInsertionPointToStart(choice.getBody());
        Value j = choice.getInductionVar();
        Value e = memref::LoadOp::create(b, s.arg(0), ValueRange{t, j});
        Value local = arith::SubIOp::create(b, e, first);
        Value low = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e, first);
        Value high = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, local, block);
        Value inside = arith::AndIOp::create(b, low, high);
        memref::StoreOp::create(b, arith::SelectOp::create(b, inside, local, none), s.arg(1),
                                ValueRange{t, j});
      });
}

KernelSpec sliceRows(int64_t width) {
  std::string name = "slice_rows_" + std::to_string(width);
  Tiling tiling;
  tiling.set("kind", "rows");
  return buildKernel(
      name, "shard.all_slice", tiling,
      [&](Builder &b) { return rowKernelArgs(b, b.getF32Type(), width); },
      [&](KernelScope &s) {
        ImplicitLocOpBuilder &b = s.b;
        Value c0 = s.index(0), c1 = s.index(1), w = s.index(width);
        Value rows = s.argIndex(2);
        Value first = arith::MulIOp::create(b, s.argIndex(3), rows);
        Value t = forEachRowOfPart(s, rows);
        Value from = arith::AddIOp::create(b, first, t);
        auto column = scf::ForOp::create(b, c0, w, c1);
        b.setInsertionPointToStart(column.getBody());
        Value c = column.getInductionVar();
        Value v = memref::LoadOp::create(b, s.arg(0), ValueRange{from, c});
        memref::StoreOp::create(b, v, s.arg(1), ValueRange{t, c});
      });
}

} // namespace kiln::kernels
