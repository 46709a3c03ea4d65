// Row-wise kernels: bf16 casts for GEMM inputs, the embedding gather, RMSNorm
// (also per head), the fused norm/residual boundary and elementwise ops.
// Rows are split over launch parts; each row is processed in vector<16xf32>
// steps when the width allows, element by element otherwise. Built as typed
// IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

constexpr int64_t kLanes = 16;

// A row kernel's tiling, and the vector a row step uses: vector<16xT> when
// the width allows, vector<1xT> otherwise.
Tiling rowsTiling(int64_t width) {
  Tiling tiling;
  tiling.set("kind", "rows").set("lanes", width % kLanes == 0 ? kLanes : 1);
  return tiling;
}
VectorType rowVector(int64_t width, Type elem) {
  return VectorType::get({width % kLanes == 0 ? kLanes : 1}, elem);
}

} // namespace

KernelSpec castToBf16(int64_t width) {
  std::string name = "cast_bf16_" + std::to_string(width);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, width}, b.getF32Type()),
            MemRefType::get({dynamic, width}, b.getBF16Type()), b.getI64Type()};
  };
  // y's rows from x's rows first, first + 1, ...; rows past x's are zeros.
  return buildKernel(name, "kiln.cast_bf16", rowsTiling(width), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    VectorType vf = rowVector(width, b.getF32Type()), vbf = rowVector(width, b.getBF16Type());
    Value x = k.arg(0), y = k.arg(1);
    Value c0 = k.index(0), step = k.index(vf.getNumElements()), widthC = k.index(width);
    Value rows = memref::DimOp::create(b, y, 0);
    Value srcRows = memref::DimOp::create(b, x, 0);
    Value firstRow = k.argIndex(2);
    Value zero = arith::ConstantOp::create(b, vbf, DenseElementsAttr::get(vbf, 0.0f));
    Value r = forEachRowOfPart(k, rows);
    Value src = arith::AddIOp::create(b, firstRow, r);
    Value inside = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, src, srcRows);
    auto columns = scf::ForOp::create(b, c0, widthC, step);
    b.setInsertionPointToStart(columns.getBody());
    Value c = columns.getInductionVar();
    auto ifInside = scf::IfOp::create(b, inside, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifInside.getThenRegion().front());
      Value v = vector::LoadOp::create(b, vf, x, ValueRange{src, c});
      Value bf = arith::TruncFOp::create(b, vbf, v);
      vector::StoreOp::create(b, bf, y, ValueRange{r, c});
      b.setInsertionPointToStart(&ifInside.getElseRegion().front());
      vector::StoreOp::create(b, zero, y, ValueRange{r, c});
    }
  });
}

KernelSpec embed(int64_t vocab, int64_t hidden) {
  std::string name = "embed_" + std::to_string(vocab) + "x" + std::to_string(hidden);
  auto args = [&](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({vocab, hidden}, b.getBF16Type()),
            MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
            MemRefType::get({ShapedType::kDynamic, hidden}, b.getF32Type()), b.getI64Type()};
  };
  // out[t] = table[ids[t]] as f32.
  return buildKernel(name, "kiln.embed", rowsTiling(hidden), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    VectorType vf = rowVector(hidden, b.getF32Type()), vbf = rowVector(hidden, b.getBF16Type());
    Value table = k.arg(0), ids = k.arg(1), out = k.arg(2);
    Value c0 = k.index(0), step = k.index(vf.getNumElements()), width = k.index(hidden);
    Value tCount = k.argIndex(3);
    Value t = forEachRowOfPart(k, tCount);
    Value id32 = memref::LoadOp::create(b, ids, ValueRange{t});
    Value id = arith::IndexCastOp::create(b, b.getIndexType(), id32);
    auto columns = scf::ForOp::create(b, c0, width, step);
    b.setInsertionPointToStart(columns.getBody());
    Value c = columns.getInductionVar();
    Value bf = vector::LoadOp::create(b, vbf, table, ValueRange{id, c});
    Value v = arith::ExtFOp::create(b, vf, bf);
    vector::StoreOp::create(b, v, out, ValueRange{t, c});
  });
}

namespace {

// The constants every row kernel starts with.
struct RowConstants {
  Value c0, c1, step, width;
};
RowConstants rowConstants(KernelScope &k, int64_t width) {
  return {k.index(0), k.index(1), k.index(width % kLanes == 0 ? kLanes : 1), k.index(width)};
}

// A loop over a row's columns in vector steps; the body gets the column.
void forColumns(KernelScope &k, const RowConstants &rc, function_ref<void(Value)> body) {
  auto loop = scf::ForOp::create(k.b, rc.c0, rc.width, rc.step);
  OpBuilder::InsertionGuard guard(k.b);
  k.b.setInsertionPointToStart(loop.getBody());
  body(loop.getInductionVar());
}

// One RMSNorm row: src[row] normalised, times the bf16 weight, into
// dst[row] (`row`: the indices of the row, then the column).
void normRow(KernelScope &k, const RowConstants &rc, Value widthF, Value src, Value dst,
             Value weight, ValueRange row, double eps, int64_t width) {
  ImplicitLocOpBuilder &b = k.b;
  FloatType f32 = b.getF32Type();
  VectorType vf = rowVector(width, f32), vbf = rowVector(width, b.getBF16Type());
  auto at = [&](Value c) {
    SmallVector<Value> indices(row.begin(), row.end());
    indices.push_back(c);
    return indices;
  };
  Value acc0 = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
  auto acc = scf::ForOp::create(b, rc.c0, rc.width, rc.step, ValueRange{acc0});
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(acc.getBody());
    Value v = vector::LoadOp::create(b, vf, src, at(acc.getInductionVar()));
    Value sq = arith::MulFOp::create(b, v, v);
    Value n = arith::AddFOp::create(b, acc.getRegionIterArgs()[0], sq);
    scf::YieldOp::create(b, ValueRange{n});
  }
  Value sum = vector::ReductionOp::create(b, vector::CombiningKind::ADD, acc.getResult(0));
  Value mean = arith::DivFOp::create(b, sum, widthF);
  Value epsC = arith::ConstantFloatOp::create(b, f32, APFloat(float(eps)));
  Value me = arith::AddFOp::create(b, mean, epsC);
  Value rms = math::SqrtOp::create(b, me);
  Value one = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
  Value inv = arith::DivFOp::create(b, one, rms);
  Value invV = vector::BroadcastOp::create(b, vf, inv);
  forColumns(k, rc, [&](Value c) {
    Value v = vector::LoadOp::create(b, vf, src, at(c));
    Value wb = vector::LoadOp::create(b, vbf, weight, ValueRange{c});
    Value wf = arith::ExtFOp::create(b, vf, wb);
    Value scaled = arith::MulFOp::create(b, v, invV);
    Value nw = arith::MulFOp::create(b, scaled, wf);
    vector::StoreOp::create(b, nw, dst, at(c));
  });
}

// An RMSNorm kernel over every row of width `width`: rows of [T, width]
// (heads = 0) or [T, heads, width] rows (head norms); the eps is part of the
// name, so norms with other eps get other kernels.
KernelSpec normKernel(const std::string &name, const std::string &op, int64_t heads, int64_t width,
                      double eps) {
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type x = heads ? MemRefType::get({dynamic, heads, width}, b.getF32Type())
                   : MemRefType::get({dynamic, width}, b.getF32Type());
    return {x, MemRefType::get({width}, b.getBF16Type()), x, b.getI64Type()};
  };
  return buildKernel(name, op, rowsTiling(width), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    RowConstants rc = rowConstants(k, width);
    Value widthF = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(float(width)));
    Value headsC = heads ? k.index(heads) : Value();
    Value rows = k.argIndex(3);
    Value r = forEachRowOfPart(k, rows);
    if (!heads) {
      normRow(k, rc, widthF, k.arg(0), k.arg(2), k.arg(1), ValueRange{r}, eps, width);
      return;
    }
    auto hh = scf::ForOp::create(b, rc.c0, headsC, rc.c1);
    b.setInsertionPointToStart(hh.getBody());
    normRow(k, rc, widthF, k.arg(0), k.arg(2), k.arg(1), ValueRange{r, hh.getInductionVar()}, eps,
            width);
  });
}

} // namespace

KernelSpec rmsNorm(int64_t width, double eps) {
  return normKernel("rms_norm_" + std::to_string(width) + epsSuffix(eps), "kiln.rms_norm", 0, width,
                    eps);
}

KernelSpec headNorm(int64_t heads, int64_t headDim, double eps) {
  return normKernel("head_norm_" + std::to_string(heads) + "x" + std::to_string(headDim) +
                        epsSuffix(eps),
                    "kiln.head_norm", heads, headDim, eps);
}

KernelSpec normResidual(int64_t width, double postEps, double nextEps) {
  std::string name =
      "norm_residual_" + std::to_string(width) + epsSuffix(postEps) + epsSuffix(nextEps);
  // res, update, post, gate, next (weights), new_res, normed; rows.
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type row = MemRefType::get({ShapedType::kDynamic, width}, b.getF32Type());
    Type w = MemRefType::get({width}, b.getBF16Type());
    return {row, row, w, w, w, row, row, b.getI64Type()};
  };
  return buildKernel(name, "kiln.norm_residual", rowsTiling(width), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    VectorType vf = rowVector(width, b.getF32Type()), vbf = rowVector(width, b.getBF16Type());
    Value res = k.arg(0), upd = k.arg(1), post = k.arg(2), gate = k.arg(3), next = k.arg(4);
    Value newRes = k.arg(5), normed = k.arg(6);
    RowConstants rc = rowConstants(k, width);
    Value widthF = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(float(width)));
    Value rows = k.argIndex(7);
    Value r = forEachRowOfPart(k, rows);
    // normed_update = RMSNorm(update; post), written to normed as scratch.
    normRow(k, rc, widthF, upd, normed, post, ValueRange{r}, postEps, width);
    // new_res = res + gate * normed_update
    forColumns(k, rc, [&](Value c) {
      Value x = vector::LoadOp::create(b, vf, res, ValueRange{r, c});
      Value u = vector::LoadOp::create(b, vf, normed, ValueRange{r, c});
      Value gb = vector::LoadOp::create(b, vbf, gate, ValueRange{c});
      Value g = arith::ExtFOp::create(b, vf, gb);
      Value gu = arith::MulFOp::create(b, g, u);
      Value h = arith::AddFOp::create(b, x, gu);
      vector::StoreOp::create(b, h, newRes, ValueRange{r, c});
    });
    normRow(k, rc, widthF, newRes, normed, next, ValueRange{r}, nextEps, width);
  });
}

KernelSpec binary(const std::string &kind, int64_t width, bool rhsIsWeight, bool rhsIsVector) {
  std::string name = kind + "_" + std::to_string(width) + (rhsIsVector ? "_bcast" : "_rows") +
                     (rhsIsWeight ? "_bf16" : "_f32");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type row = MemRefType::get({dynamic, width}, b.getF32Type());
    Type rhsElem = rhsIsWeight ? b.getBF16Type() : b.getF32Type();
    Type rhs = rhsIsVector ? MemRefType::get({width}, rhsElem)
                           : MemRefType::get({dynamic, width}, rhsElem);
    return {row, rhs, row, b.getI64Type()};
  };
  return buildKernel(name, "kiln." + kind, rowsTiling(width), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    VectorType vf = rowVector(width, b.getF32Type());
    VectorType vr = rowVector(width, rhsIsWeight ? b.getBF16Type() : b.getF32Type());
    Value lhs = k.arg(0), rhs = k.arg(1), out = k.arg(2);
    RowConstants rc = rowConstants(k, width);
    Value zero = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
    Value rows = k.argIndex(3);
    Value r = forEachRowOfPart(k, rows);
    forColumns(k, rc, [&](Value c) {
      Value l = vector::LoadOp::create(b, vf, lhs, ValueRange{r, c});
      Value rv = rhsIsVector ? vector::LoadOp::create(b, vr, rhs, ValueRange{c})
                             : vector::LoadOp::create(b, vr, rhs, ValueRange{r, c});
      Value rf = rhsIsWeight ? arith::ExtFOp::create(b, vf, rv).getResult()
                             : arith::AddFOp::create(b, rv, zero).getResult();
      Value y = kind == "mul" ? arith::MulFOp::create(b, l, rf).getResult()
                              : arith::AddFOp::create(b, l, rf).getResult();
      vector::StoreOp::create(b, y, out, ValueRange{r, c});
    });
  });
}

} // namespace kiln::kernels
