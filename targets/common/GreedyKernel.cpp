// Greedy decoding's token choice where the logits are: a GPU step of 64
// conversations writes 64 rows of a 202048-entry vocabulary (52 MB), whose
// copy to the host and scan there would take longer than the step itself.
// The kernel leaves one 64-bit key per row instead; the runtime reads the
// keys back (runtime/engine/DeviceGreedy.h). A key orders like (logit,
// -index): the largest logit, the first of equal ones, as std::max_element
// picks on the host.
//
// Threads take a row's entries in a stride (consecutive threads, consecutive
// entries), keep their best, combine it across the warp with shuffles, and
// the warp's first lane folds it into the row's key with an atomic max. The
// launch gives each row a whole number of warps: %parts / %rows threads.
// Built as typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

namespace kiln::kernels {

using namespace mlir;

namespace {

struct Best {
  Value value, index;
};

// One step of the warp's combination: the better of this lane's (value,
// index) and the lane `offset` away (the larger value, or the lower index
// of equal ones).
Best combineStep(KernelScope &k, int64_t offset, Best own, Value width) {
  ImplicitLocOpBuilder &b = k.b;
  Value off = k.i32(offset);
  Value otherValue =
      gpu::ShuffleOp::create(b, own.value, off, width, gpu::ShuffleMode::XOR).getShuffleResult();
  Value otherIndex =
      gpu::ShuffleOp::create(b, own.index, off, width, gpu::ShuffleMode::XOR).getShuffleResult();
  Value better = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, otherValue, own.value);
  Value same = arith::CmpFOp::create(b, arith::CmpFPredicate::OEQ, otherValue, own.value);
  Value lower = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, otherIndex, own.index);
  Value tie = arith::AndIOp::create(b, same, lower);
  Value take = arith::OrIOp::create(b, better, tie);
  Value value = arith::SelectOp::create(b, take, otherValue, own.value);
  Value index = arith::SelectOp::create(b, take, otherIndex, own.index);
  return {value, index};
}

// The row's key from its best (value, index): the value's bits (-0 made +0,
// which compare equal), reordered so that unsigned order is float order;
// below them the index's complement (the first index wins a tie).
Value orderedKey(KernelScope &k, Best best, Value allOnes, Value signBit, Value zero32,
                 Value shift32) {
  ImplicitLocOpBuilder &b = k.b;
  Value plusZero = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(0.0f));
  Value canonical = arith::AddFOp::create(b, best.value, plusZero);
  Value bits = arith::BitcastOp::create(b, b.getI32Type(), canonical);
  Value negative = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, bits, zero32);
  Value flipped = arith::XOrIOp::create(b, bits, allOnes);
  Value marked = arith::OrIOp::create(b, bits, signBit);
  Value ordered = arith::SelectOp::create(b, negative, flipped, marked);
  Value hi32 = arith::ExtUIOp::create(b, b.getI64Type(), ordered);
  Value hi = arith::ShLIOp::create(b, hi32, shift32);
  Value rank = arith::XOrIOp::create(b, best.index, allOnes);
  Value lo = arith::ExtUIOp::create(b, b.getI64Type(), rank);
  return arith::OrIOp::create(b, hi, lo);
}

} // namespace

KernelSpec greedyKeys() {
  Tiling tiling;
  tiling.set("kind", "greedy");
  auto args = [](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({ShapedType::kDynamic}, b.getF32Type()),
            MemRefType::get({ShapedType::kDynamic}, b.getI64Type()), b.getI64Type(),
            b.getI64Type()};
  };
  return buildKernel("greedy_keys", "kiln.greedy", tiling, args, [](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    FloatType f32 = b.getF32Type();
    Type i32 = b.getI32Type();
    Value logits = k.arg(0), keys = k.arg(1), rows = k.arg(2), vocab = k.arg(3);
    Value part = k.arg(4), parts = k.arg(5);
    Value zero = k.i64(0);
    Value c32 = k.i64(32);
    Value width = k.i32(warp::kWarp);
    Value negInf =
        arith::ConstantFloatOp::create(b, f32, APFloat(-std::numeric_limits<float>::infinity()));
    Value allOnes = k.i32(-1);
    Value signBit = k.i32(std::numeric_limits<int32_t>::min());
    Value zero32 = k.i32(0);
    Value shift32 = k.i64(32);
    // The launch gives each row %parts / %rows threads.
    Value perRow = arith::DivUIOp::create(b, parts, rows);
    Value r = arith::DivUIOp::create(b, part, perRow);
    Value first = arith::RemUIOp::create(b, part, perRow);
    Value live = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, rows);
    Value end = arith::SelectOp::create(b, live, vocab, zero);
    Value base = arith::MulIOp::create(b, r, vocab);
    Value none = arith::TruncIOp::create(b, i32, vocab);
    auto loop = scf::ForOp::create(b, first, end, perRow, ValueRange{negInf, none});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value e = loop.getInductionVar();
      Value bv = loop.getRegionIterArgs()[0], bi = loop.getRegionIterArgs()[1];
      Value at = arith::AddIOp::create(b, base, e);
      Value ix = arith::IndexCastOp::create(b, b.getIndexType(), at);
      Value x = memref::LoadOp::create(b, logits, ValueRange{ix});
      // Better, or the first number (-inf included; NaN never).
      Value above = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, x, bv);
      Value number = arith::CmpFOp::create(b, arith::CmpFPredicate::ORD, x, x);
      Value unset = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bi, none);
      Value firstNumber = arith::AndIOp::create(b, number, unset);
      Value gt = arith::OrIOp::create(b, above, firstNumber);
      Value e32 = arith::TruncIOp::create(b, i32, e);
      Value nv = arith::SelectOp::create(b, gt, x, bv);
      Value ni = arith::SelectOp::create(b, gt, e32, bi);
      scf::YieldOp::create(b, ValueRange{nv, ni});
    }
    Best best{loop.getResult(0), loop.getResult(1)};
    for (int64_t offset = 1; offset < warp::kWarp; offset *= 2)
      best = combineStep(k, offset, best, width);
    Value lane = arith::RemUIOp::create(b, part, c32);
    Value lead = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane, zero);
    Value store = arith::AndIOp::create(b, lead, live);
    auto ifStore = scf::IfOp::create(b, store, /*withElse=*/false);
    b.setInsertionPointToStart(&ifStore.getThenRegion().front());
    Value key = orderedKey(k, best, allOnes, signBit, zero32, shift32);
    Value rx = arith::IndexCastOp::create(b, b.getIndexType(), r);
    memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::maxu, key, keys, ValueRange{rx});
  });
}

} // namespace kiln::kernels
