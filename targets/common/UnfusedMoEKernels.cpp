// The latent MoE's expert stage op by op, for graphs that were not fused
// into kiln.megamoe: grouped SwiGLU over each token's selected experts, the
// per-expert RMSNorm, the weighted combine, and NVFP4 decoding of a stacked
// weight into bf16. An expert index of -1 (an expert on another rank) gives a
// zero row, as the ops define.
// Built as typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"

#include "runtime/core/Float.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <limits>

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
        memref::StoreOp::create(b, swiGlu(b, g, u, one), h, ValueRange{o});
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
  Tiling tiling;
  tiling.set("kind", "scalar").set("parallel", "rows");
  auto args = [&](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({matrices, rows, cols / 2}, b.getI8Type()),
            MemRefType::get({matrices, rows, cols / 16}, b.getI8Type()),
            MemRefType::get({matrices}, b.getF32Type()),
            MemRefType::get({matrices, rows, cols}, b.getBF16Type())};
  };
  return buildKernel(name, "kiln.nvfp4_dequant", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    FloatType f32 = b.getF32Type();
    Type index = b.getIndexType();
    MemRefType e2m1Type = decodeTable(k, name + "_e2m1", 16, e2m1ToFloat);
    MemRefType e4m3Type = decodeTable(k, name + "_e4m3", 256, e4m3ToFloat);
    Value packed = k.arg(0), scales = k.arg(1), global = k.arg(2), out = k.arg(3);
    Value c0 = k.index(0), c1 = k.index(1), c2 = k.index(2), c4 = k.index(4), c15 = k.index(15);
    Value c16 = k.index(16), c255 = k.index(255);
    Value rowsPer = k.index(rows), allRows = k.index(matrices * rows), half = k.index(cols / 2);
    Value e2m1 = memref::GetGlobalOp::create(b, e2m1Type, name + "_e2m1");
    Value e4m3 = memref::GetGlobalOp::create(b, e4m3Type, name + "_e4m3");
    Value row = forEachRowOfPart(k, allRows);
    Value m = arith::DivUIOp::create(b, row, rowsPer);
    Value o = arith::RemUIOp::create(b, row, rowsPer);
    Value g = memref::LoadOp::create(b, global, ValueRange{m});
    auto pairs = scf::ForOp::create(b, c0, half, c1);
    b.setInsertionPointToStart(pairs.getBody());
    Value at = pairs.getInductionVar();
    // A byte's two codes (low nibble first) and their block's scale.
    Value byte = memref::LoadOp::create(b, packed, ValueRange{m, o, at});
    Value bi = arith::IndexCastOp::create(b, index, byte);
    Value bu = arith::AndIOp::create(b, bi, c255);
    Value loIndex = arith::AndIOp::create(b, bu, c15);
    Value hiIndex = arith::ShRUIOp::create(b, bu, c4);
    Value col0 = arith::MulIOp::create(b, at, c2);
    Value col1 = arith::AddIOp::create(b, col0, c1);
    Value blk = arith::DivUIOp::create(b, col0, c16);
    Value sb = memref::LoadOp::create(b, scales, ValueRange{m, o, blk});
    Value sbi = arith::IndexCastOp::create(b, index, sb);
    Value sbu = arith::AndIOp::create(b, sbi, c255);
    Value scale = memref::LoadOp::create(b, e4m3, ValueRange{sbu});
    Value lo = memref::LoadOp::create(b, e2m1, ValueRange{loIndex});
    Value hi = memref::LoadOp::create(b, e2m1, ValueRange{hiIndex});
    Value loScaled = arith::MulFOp::create(b, lo, scale);
    Value hiScaled = arith::MulFOp::create(b, hi, scale);
    Value loGlobal = arith::MulFOp::create(b, loScaled, g);
    Value hiGlobal = arith::MulFOp::create(b, hiScaled, g);
    Value loB = arith::TruncFOp::create(b, b.getBF16Type(), loGlobal);
    Value hiB = arith::TruncFOp::create(b, b.getBF16Type(), hiGlobal);
    memref::StoreOp::create(b, loB, out, ValueRange{m, o, col0});
    memref::StoreOp::create(b, hiB, out, ValueRange{m, o, col1});
  });
}

} // namespace kiln::kernels
