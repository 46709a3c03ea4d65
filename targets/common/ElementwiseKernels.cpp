// Row-wise kernels: bf16 casts for GEMM inputs, the embedding gather, RMSNorm
// (also per head), the fused norm/residual boundary and elementwise ops.
// Rows are split over launch parts; each row is processed in vector<16xf32>
// steps when the width allows, element by element otherwise.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

constexpr int64_t kLanes = 16;

std::string lanesFor(int64_t width) { return width % kLanes == 0 ? "16" : "1"; }

// The vector type a row step uses: vector<16xT> or vector<1xT>.
std::string vec(int64_t width, const std::string &elem) {
  return "vector<" + lanesFor(width) + "x" + elem + ">";
}

std::string tilingAttr(int64_t width) {
  return "{kind = \"rows\", lanes = " + lanesFor(width) + " : i64}";
}

} // namespace

// The typed kernels' tiling and row vectors (as tilingAttr and vec give the
// text ones).
static Tiling rowsTiling(int64_t width) {
  Tiling tiling;
  tiling.set("kind", "rows").set("lanes", width % kLanes == 0 ? kLanes : 1);
  return tiling;
}
static VectorType rowVector(int64_t width, Type elem) {
  return VectorType::get({width % kLanes == 0 ? kLanes : 1}, elem);
}

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

// The body of one RMSNorm row: reads %src row %srow, writes %dst row %drow
// with weight %w, for a row of width @@w@@.
static std::string normRow(const std::string &src, const std::string &srcType,
                           const std::string &dst, const std::string &dstType,
                           const std::string &weight, const std::string &weightType,
                           const std::string &row, const std::string &eps, int64_t width,
                           const std::string &prefix) {
  return fillTemplate(R"(
    %@@p@@acc0 = arith.constant dense<0.0> : @@vf@@
    %@@p@@acc = scf.for %c = %c0 to %width step %step iter_args(%a = %@@p@@acc0) -> (@@vf@@) {
      %v = vector.load @@src@@[@@row@@, %c] : @@srcType@@, @@vf@@
      %sq = arith.mulf %v, %v : @@vf@@
      %n = arith.addf %a, %sq : @@vf@@
      scf.yield %n : @@vf@@
    }
    %@@p@@sum = vector.reduction <add>, %@@p@@acc : @@vf@@ into f32
    %@@p@@mean = arith.divf %@@p@@sum, %widthf : f32
    %@@p@@eps = arith.constant @@eps@@ : f32
    %@@p@@me = arith.addf %@@p@@mean, %@@p@@eps : f32
    %@@p@@rms = math.sqrt %@@p@@me : f32
    %@@p@@onef = arith.constant 1.0 : f32
    %@@p@@inv = arith.divf %@@p@@onef, %@@p@@rms : f32
    %@@p@@invv = vector.broadcast %@@p@@inv : f32 to @@vf@@
    scf.for %c = %c0 to %width step %step {
      %v = vector.load @@src@@[@@row@@, %c] : @@srcType@@, @@vf@@
      %wb = vector.load @@weight@@[%c] : @@weightType@@, @@vbf@@
      %wf = arith.extf %wb : @@vbf@@ to @@vf@@
      %s = arith.mulf %v, %@@p@@invv : @@vf@@
      %nw = arith.mulf %s, %wf : @@vf@@
      vector.store %nw, @@dst@@[@@row@@, %c] : @@dstType@@, @@vf@@
    }
)",
                      {{"p", prefix},
                       {"src", src},
                       {"srcType", srcType},
                       {"dst", dst},
                       {"dstType", dstType},
                       {"weight", weight},
                       {"weightType", weightType},
                       {"row", row},
                       {"eps", eps},
                       {"vf", vec(width, "f32")},
                       {"vbf", vec(width, "bf16")}});
}

namespace {

// An RMSNorm kernel over every row of width `width`: rows of [T, width]
// (heads = 0) or [T, heads, width] rows (head norms); the eps is part of the
// name, so norms with other eps get other kernels.
KernelSpec normKernel(const std::string &name, const std::string &op, int64_t heads, int64_t width,
                      double eps) {
  std::string w = "memref<" + std::to_string(width) + "xbf16>";
  std::string xt = heads
                       ? "memref<?x" + std::to_string(heads) + "x" + std::to_string(width) + "xf32>"
                       : "memref<?x" + std::to_string(width) + "xf32>";
  std::string loop = heads ? R"(
    scf.for %hh = %c0 to %heads step %c1 {
      @@norm@@
    })"
                           : R"(
    @@norm@@)";
  std::string body = fillTemplate(
      R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: @@xt@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = @@tiling@@} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %step = arith.constant @@lanes@@ : index
  %width = arith.constant @@w@@ : index
  %widthf = arith.constant @@wf@@ : f32
@@heads@@  %rows = arith.index_cast %rows_i : i64 to index
  @@range@@
  scf.for %r = %rbegin to %rend step %c1 {@@loop@@
  }
  return
}
)",
      {{"name", name},
       {"xt", xt},
       {"wt", w},
       {"w", std::to_string(width)},
       {"wf", floatLiteral(double(width))},
       {"heads", heads ? "  %heads = arith.constant " + std::to_string(heads) + " : index\n" : ""},
       {"lanes", lanesFor(width)},
       {"tiling", tilingAttr(width)},
       {"range", partRange("%rows", "r")},
       {"loop", loop}});
  body = fillTemplate(body, {{"norm", normRow("%x", xt, "%y", xt, "%w", w, heads ? "%r, %hh" : "%r",
                                              floatLiteral(eps), width, "n")}});
  return textKernel(name, op, body);
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
  std::string row = "memref<?x" + std::to_string(width) + "xf32>";
  std::string w = "memref<" + std::to_string(width) + "xbf16>";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%res: @@row@@, %upd: @@row@@, %post: @@wt@@, %gate: @@wt@@, %next: @@wt@@,
                    %new_res: @@row@@, %normed: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = @@tiling@@} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %step = arith.constant @@lanes@@ : index
  %width = arith.constant @@w@@ : index
  %widthf = arith.constant @@wf@@ : f32
  %rows = arith.index_cast %rows_i : i64 to index
  @@range@@
  scf.for %r = %rbegin to %rend step %c1 {
    // normed_update = RMSNorm(update; post), written to %normed as scratch.
    @@post@@
    // new_res = res + gate * normed_update
    scf.for %c = %c0 to %width step %step {
      %x = vector.load %res[%r, %c] : @@row@@, @@vf@@
      %u = vector.load %normed[%r, %c] : @@row@@, @@vf@@
      %gb = vector.load %gate[%c] : @@wt@@, @@vbf@@
      %g = arith.extf %gb : @@vbf@@ to @@vf@@
      %gu = arith.mulf %g, %u : @@vf@@
      %h = arith.addf %x, %gu : @@vf@@
      vector.store %h, %new_res[%r, %c] : @@row@@, @@vf@@
    }
    @@next@@
  }
  return
}
)",
                                  {{"name", name},
                                   {"row", row},
                                   {"wt", w},
                                   {"w", std::to_string(width)},
                                   {"wf", floatLiteral(double(width))},
                                   {"lanes", lanesFor(width)},
                                   {"vf", vec(width, "f32")},
                                   {"vbf", vec(width, "bf16")},
                                   {"tiling", tilingAttr(width)},
                                   {"range", partRange("%rows", "r")},
                                   {"post", normRow("%upd", row, "%normed", row, "%post", w, "%r",
                                                    floatLiteral(postEps), width, "p")},
                                   {"next", normRow("%new_res", row, "%normed", row, "%next", w,
                                                    "%r", floatLiteral(nextEps), width, "q")}});
  return textKernel(name, "kiln.norm_residual", body);
}

KernelSpec binary(const std::string &kind, int64_t width, bool rhsIsWeight, bool rhsIsVector) {
  std::string name = kind + "_" + std::to_string(width) + (rhsIsVector ? "_bcast" : "_rows") +
                     (rhsIsWeight ? "_bf16" : "_f32");
  std::string row = "memref<?x" + std::to_string(width) + "xf32>";
  std::string rhsElem = rhsIsWeight ? "bf16" : "f32";
  std::string rhsType = rhsIsVector ? "memref<" + std::to_string(width) + "x" + rhsElem + ">"
                                    : "memref<?x" + std::to_string(width) + "x" + rhsElem + ">";
  std::string load =
      rhsIsVector ? "%rv = vector.load %rhs[%c] : " + rhsType + ", " + vec(width, rhsElem)
                  : "%rv = vector.load %rhs[%r, %c] : " + rhsType + ", " + vec(width, rhsElem);
  std::string extend =
      rhsIsWeight ? "%rf = arith.extf %rv : " + vec(width, "bf16") + " to " + vec(width, "f32")
                  : "%rf = arith.addf %rv, %zero : " + vec(width, "f32");
  std::string body = fillTemplate(R"(
func.func @@@name@@(%lhs: @@row@@, %rhs: @@rt@@, %out: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = @@tiling@@} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %step = arith.constant @@lanes@@ : index
  %width = arith.constant @@w@@ : index
  %zero = arith.constant dense<0.0> : @@vf@@
  %rows = arith.index_cast %rows_i : i64 to index
  @@range@@
  scf.for %r = %rbegin to %rend step %c1 {
    scf.for %c = %c0 to %width step %step {
      %l = vector.load %lhs[%r, %c] : @@row@@, @@vf@@
      @@load@@
      @@extend@@
      %y = arith.@@op@@ %l, %rf : @@vf@@
      vector.store %y, %out[%r, %c] : @@row@@, @@vf@@
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"row", row},
                                   {"rt", rhsType},
                                   {"w", std::to_string(width)},
                                   {"lanes", lanesFor(width)},
                                   {"vf", vec(width, "f32")},
                                   {"tiling", tilingAttr(width)},
                                   {"range", partRange("%rows", "r")},
                                   {"load", load},
                                   {"extend", extend},
                                   {"op", kind == "mul" ? "mulf" : "addf"}});
  return textKernel(name, "kiln." + kind, body);
}

} // namespace kiln::kernels
