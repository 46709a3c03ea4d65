// The latent MoE's expert stage op by op, for graphs that were not fused
// into kiln.megamoe: grouped SwiGLU over each token's selected experts, the
// per-expert RMSNorm, the weighted combine, and NVFP4 decoding of a stacked
// weight into bf16. An expert index of -1 (an expert on another rank) gives a
// zero row, as the ops define.
// Built as typed IR (KernelBuilder.h), except the NVFP4 decode (text, with
// its lookup tables).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "runtime/core/Float.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

Tiling scalarTokens() {
  Tiling tiling;
  tiling.set("kind", "scalar").set("parallel", "tokens");
  return tiling;
}

MemRefType tokensOf(Builder &b, ArrayRef<int64_t> rest, Type elem) {
  SmallVector<int64_t> shape = {ShapedType::kDynamic};
  shape.append(rest.begin(), rest.end());
  return MemRefType::get(shape, elem);
}

// For choice j of token t: when its expert index is -1 (another rank's),
// zeros into out[t, j, :]; else `present(e)` with the expert as an index.
void perChoice(KernelScope &k, Value idx, Value out, Value t, Value j, Value none, Value zero,
               Value c0, Value c1, Value latent, function_ref<void(Value)> present) {
  ImplicitLocOpBuilder &b = k.b;
  Value e32 = memref::LoadOp::create(b, idx, ValueRange{t, j});
  Value absent = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, e32, none);
  auto ifAbsent = scf::IfOp::create(b, absent, /*withElse=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifAbsent.getThenRegion().front());
    auto loop = scf::ForOp::create(b, c0, latent, c1);
    b.setInsertionPointToStart(loop.getBody());
    memref::StoreOp::create(b, zero, out, ValueRange{t, j, loop.getInductionVar()});
  }
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&ifAbsent.getElseRegion().front());
  present(arith::IndexCastOp::create(b, b.getIndexType(), e32));
}

} // namespace

KernelSpec expertSwiGLU(int64_t experts, int64_t k, int64_t intermediate, int64_t latent) {
  std::string E = std::to_string(experts), K = std::to_string(k), I = std::to_string(intermediate),
              L = std::to_string(latent);
  std::string name = "expert_swiglu_" + E + "e_top" + K + "_" + I + "x" + L;
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type stack = MemRefType::get({experts, intermediate, latent}, b.getBF16Type());
    return {tokensOf(b, {latent}, b.getF32Type()),
            tokensOf(b, {k}, b.getI32Type()),
            stack,
            stack,
            MemRefType::get({experts, latent, intermediate}, b.getBF16Type()),
            tokensOf(b, {k, latent}, b.getF32Type()),
            b.getI64Type()};
  };
  return buildKernel(name, "kiln.expert_swiglu", scalarTokens(), args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    Value z = s.arg(0), idx = s.arg(1), gate = s.arg(2), up = s.arg(3), down = s.arg(4),
          out = s.arg(5);
    Value c0 = s.index(0), c1 = s.index(1), choices = s.index(k);
    Value inter = s.index(intermediate), width = s.index(latent);
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value one = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value none = s.i32(-1);
    Value rows = s.argIndex(6);
    Value h = memref::AllocaOp::create(b, MemRefType::get({intermediate}, f32));
    Value t = forEachRowOfPart(s, rows);
    auto choice = scf::ForOp::create(b, c0, choices, c1);
    b.setInsertionPointToStart(choice.getBody());
    Value j = choice.getInductionVar();
    perChoice(s, idx, out, t, j, none, zero, c0, c1, width, [&](Value e) {
      // h = silu(gate z) * (up z), then out = down h.
      {
        OpBuilder::InsertionGuard guard(b);
        auto rowLoop = scf::ForOp::create(b, c0, inter, c1);
        b.setInsertionPointToStart(rowLoop.getBody());
        Value o = rowLoop.getInductionVar();
        auto dot = scf::ForOp::create(b, c0, width, c1, ValueRange{zero, zero});
        {
          OpBuilder::InsertionGuard inner(b);
          b.setInsertionPointToStart(dot.getBody());
          Value c = dot.getInductionVar();
          Value g = dot.getRegionIterArgs()[0], u = dot.getRegionIterArgs()[1];
          Value x = memref::LoadOp::create(b, z, ValueRange{t, c});
          Value gb = memref::LoadOp::create(b, gate, ValueRange{e, o, c});
          Value ub = memref::LoadOp::create(b, up, ValueRange{e, o, c});
          Value gf = arith::ExtFOp::create(b, f32, gb);
          Value uf = arith::ExtFOp::create(b, f32, ub);
          Value gx = arith::MulFOp::create(b, gf, x);
          Value ux = arith::MulFOp::create(b, uf, x);
          Value g2 = arith::AddFOp::create(b, g, gx);
          Value u2 = arith::AddFOp::create(b, u, ux);
          scf::YieldOp::create(b, ValueRange{g2, u2});
        }
        Value g = dot.getResult(0), u = dot.getResult(1);
        Value ng = arith::NegFOp::create(b, g);
        Value ex = math::ExpOp::create(b, ng);
        Value den = arith::AddFOp::create(b, one, ex);
        Value sig = arith::DivFOp::create(b, g, den);
        Value hv = arith::MulFOp::create(b, sig, u);
        memref::StoreOp::create(b, hv, h, ValueRange{o});
      }
      auto colLoop = scf::ForOp::create(b, c0, width, c1);
      b.setInsertionPointToStart(colLoop.getBody());
      Value c = colLoop.getInductionVar();
      auto sum = scf::ForOp::create(b, c0, inter, c1, ValueRange{zero});
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(sum.getBody());
        Value o = sum.getInductionVar();
        Value hv = memref::LoadOp::create(b, h, ValueRange{o});
        Value db = memref::LoadOp::create(b, down, ValueRange{e, c, o});
        Value df = arith::ExtFOp::create(b, f32, db);
        Value p = arith::MulFOp::create(b, df, hv);
        Value s2 = arith::AddFOp::create(b, sum.getRegionIterArgs()[0], p);
        scf::YieldOp::create(b, ValueRange{s2});
      }
      memref::StoreOp::create(b, sum.getResult(0), out, ValueRange{t, j, c});
    });
  });
}

KernelSpec expertNorm(int64_t experts, int64_t k, int64_t latent, double eps) {
  std::string E = std::to_string(experts), K = std::to_string(k), L = std::to_string(latent);
  std::string name = "expert_norm_" + E + "e_top" + K + "_" + L + "_eps" +
                     std::to_string(static_cast<long long>(eps * 1e9));
  auto args = [&](Builder &b) -> std::vector<Type> {
    return {tokensOf(b, {k, latent}, b.getF32Type()), tokensOf(b, {k}, b.getI32Type()),
            MemRefType::get({experts, latent}, b.getBF16Type()),
            tokensOf(b, {k, latent}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.expert_norm", scalarTokens(), args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    Value y = s.arg(0), idx = s.arg(1), w = s.arg(2), out = s.arg(3);
    Value c0 = s.index(0), c1 = s.index(1), choices = s.index(k), width = s.index(latent);
    Value widthF = arith::ConstantFloatOp::create(b, f32, APFloat(float(latent)));
    Value epsF = arith::ConstantFloatOp::create(b, f32, APFloat(float(eps)));
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value one = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value none = s.i32(-1);
    Value rows = s.argIndex(4);
    Value t = forEachRowOfPart(s, rows);
    auto choice = scf::ForOp::create(b, c0, choices, c1);
    b.setInsertionPointToStart(choice.getBody());
    Value j = choice.getInductionVar();
    perChoice(s, idx, out, t, j, none, zero, c0, c1, width, [&](Value e) {
      auto squares = scf::ForOp::create(b, c0, width, c1, ValueRange{zero});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(squares.getBody());
        Value v = memref::LoadOp::create(b, y, ValueRange{t, j, squares.getInductionVar()});
        Value sq = arith::MulFOp::create(b, v, v);
        Value s2 = arith::AddFOp::create(b, squares.getRegionIterArgs()[0], sq);
        scf::YieldOp::create(b, ValueRange{s2});
      }
      Value mean = arith::DivFOp::create(b, squares.getResult(0), widthF);
      Value me = arith::AddFOp::create(b, mean, epsF);
      Value rms = math::SqrtOp::create(b, me);
      Value inv = arith::DivFOp::create(b, one, rms);
      auto scale = scf::ForOp::create(b, c0, width, c1);
      b.setInsertionPointToStart(scale.getBody());
      Value c = scale.getInductionVar();
      Value v = memref::LoadOp::create(b, y, ValueRange{t, j, c});
      Value wb = memref::LoadOp::create(b, w, ValueRange{e, c});
      Value wf = arith::ExtFOp::create(b, f32, wb);
      Value n = arith::MulFOp::create(b, v, inv);
      Value r = arith::MulFOp::create(b, n, wf);
      memref::StoreOp::create(b, r, out, ValueRange{t, j, c});
    });
  });
}

KernelSpec combine(int64_t k, int64_t latent) {
  std::string K = std::to_string(k), L = std::to_string(latent);
  std::string name = "combine_top" + K + "_" + L;
  auto args = [&](Builder &b) -> std::vector<Type> {
    return {tokensOf(b, {k, latent}, b.getF32Type()), tokensOf(b, {k}, b.getF32Type()),
            tokensOf(b, {latent}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.combine", scalarTokens(), args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    Value y = s.arg(0), w = s.arg(1), out = s.arg(2);
    Value c0 = s.index(0), c1 = s.index(1), choices = s.index(k), width = s.index(latent);
    Value zero = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(0.0f));
    Value rows = s.argIndex(3);
    Value t = forEachRowOfPart(s, rows);
    auto column = scf::ForOp::create(b, c0, width, c1);
    b.setInsertionPointToStart(column.getBody());
    Value c = column.getInductionVar();
    auto sum = scf::ForOp::create(b, c0, choices, c1, ValueRange{zero});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(sum.getBody());
      Value j = sum.getInductionVar();
      Value wj = memref::LoadOp::create(b, w, ValueRange{t, j});
      Value v = memref::LoadOp::create(b, y, ValueRange{t, j, c});
      Value p = arith::MulFOp::create(b, wj, v);
      Value a = arith::AddFOp::create(b, sum.getRegionIterArgs()[0], p);
      scf::YieldOp::create(b, ValueRange{a});
    }
    memref::StoreOp::create(b, sum.getResult(0), out, ValueRange{t, c});
  });
}

KernelSpec nvfp4Dequant(int64_t matrices, int64_t rows, int64_t cols) {
  std::string E = std::to_string(matrices), O = std::to_string(rows), I = std::to_string(cols);
  std::string name = "nvfp4_dequant_" + E + "x" + O + "x" + I;
  std::string luts =
      lookupTable(name + "_e2m1", 16, e2m1ToFloat) + lookupTable(name + "_e4m3", 256, e4m3ToFloat);
  std::string body = luts + fillTemplate(R"(
func.func @@@name@@(%packed: memref<@@E@@x@@O@@x@@IH@@xi8>, %scales: memref<@@E@@x@@O@@x@@IS@@xi8>, %global: memref<@@E@@xf32>,
                    %out: memref<@@E@@x@@O@@x@@I@@xbf16>, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "scalar", parallel = "rows"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  %c255 = arith.constant 255 : index
  %rows_per = arith.constant @@O@@ : index
  %all_rows = arith.constant @@ALL@@ : index
  %half = arith.constant @@IH@@ : index
  %e2m1 = memref.get_global @@@name@@_e2m1 : memref<16xf32>
  %e4m3 = memref.get_global @@@name@@_e4m3 : memref<256xf32>
  @@range@@
  scf.for %row = %rbegin to %rend step %c1 {
    %m = arith.divui %row, %rows_per : index
    %o = arith.remui %row, %rows_per : index
    %g = memref.load %global[%m] : memref<@@E@@xf32>
    scf.for %b = %c0 to %half step %c1 {
      %byte = memref.load %packed[%m, %o, %b] : memref<@@E@@x@@O@@x@@IH@@xi8>
      %bi = arith.index_cast %byte : i8 to index
      %bu = arith.andi %bi, %c255 : index
      %lo_i = arith.andi %bu, %c15 : index
      %hi_i = arith.shrui %bu, %c4 : index
      %col0 = arith.muli %b, %c2 : index
      %col1 = arith.addi %col0, %c1 : index
      %blk = arith.divui %col0, %c16 : index
      %sb = memref.load %scales[%m, %o, %blk] : memref<@@E@@x@@O@@x@@IS@@xi8>
      %sbi = arith.index_cast %sb : i8 to index
      %sbu = arith.andi %sbi, %c255 : index
      %s = memref.load %e4m3[%sbu] : memref<256xf32>
      %lo = memref.load %e2m1[%lo_i] : memref<16xf32>
      %hi = memref.load %e2m1[%hi_i] : memref<16xf32>
      %lo_s = arith.mulf %lo, %s : f32
      %hi_s = arith.mulf %hi, %s : f32
      %lo_g = arith.mulf %lo_s, %g : f32
      %hi_g = arith.mulf %hi_s, %g : f32
      %lo_b = arith.truncf %lo_g : f32 to bf16
      %hi_b = arith.truncf %hi_g : f32 to bf16
      memref.store %lo_b, %out[%m, %o, %col0] : memref<@@E@@x@@O@@x@@I@@xbf16>
      memref.store %hi_b, %out[%m, %o, %col1] : memref<@@E@@x@@O@@x@@I@@xbf16>
    }
  }
  return
}
)",
                                         {{"name", name},
                                          {"E", E},
                                          {"O", O},
                                          {"I", I},
                                          {"IH", std::to_string(cols / 2)},
                                          {"IS", std::to_string(cols / 16)},
                                          {"ALL", std::to_string(matrices * rows)},
                                          {"range", partRange("%all_rows", "r")}});
  return textKernel(name, "kiln.nvfp4_dequant", body);
}

} // namespace kiln::kernels
