// The latent MoE: the softmax top-k router, and the MegaMoE stage for one
// device (every expert local): for each token and selected expert, gate/up
// products, SwiGLU, the down product, the expert's RMSNorm and the weighted
// sum. NVFP4 experts are decoded inside the products (E2M1 codes and E4M3
// block scales through lookup tables, times the expert's global scale), so
// no bf16 copy of the weights ever exists.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"

#include "runtime/core/Float.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cstdint>
#include <limits>
#include <string>

namespace kiln::kernels {

using namespace mlir;

std::vector<Type> routerTopKArgs(Builder &b, int64_t experts, int64_t k) {
  const int64_t dynamic = ShapedType::kDynamic;
  return {MemRefType::get({dynamic, experts}, b.getF32Type()),
          MemRefType::get({dynamic, k}, b.getF32Type()),
          MemRefType::get({dynamic, k}, b.getI32Type()), b.getI64Type()};
}

// The router, built as typed IR (KernelBuilder.h): per token, the softmax
// numerators, then k rounds of argmax (ties to the lower index; chosen
// entries become -1), then the chosen weights renormalised.
KernelSpec routerTopK(int64_t experts, int64_t k) {
  std::string name = "router_top" + std::to_string(k) + "_of_" + std::to_string(experts);
  Tiling tiling;
  tiling.set("kind", "rows").set("parallel", "tokens");
  auto args = [&](Builder &b) { return routerTopKArgs(b, experts, k); };
  return buildKernel(name, "kiln.router_topk", tiling, args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    Value logits = s.arg(0), weights = s.arg(1), indices = s.arg(2);
    Value c0 = s.index(0), c1 = s.index(1), expertsC = s.index(experts), kC = s.index(k);
    Value negInf =
        arith::ConstantFloatOp::create(b, f32, APFloat(-std::numeric_limits<float>::infinity()));
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value taken = arith::ConstantFloatOp::create(b, f32, APFloat(-1.0f));
    Value rows = s.argIndex(3);
    Value p = memref::AllocaOp::create(b, MemRefType::get({experts}, f32));
    Value t = forEachRowOfPart(s, rows);
    auto maxLoop = scf::ForOp::create(b, c0, expertsC, c1, ValueRange{negInf});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(maxLoop.getBody());
      Value l = memref::LoadOp::create(b, logits, ValueRange{t, maxLoop.getInductionVar()});
      Value n = arith::MaximumFOp::create(b, maxLoop.getRegionIterArgs()[0], l);
      scf::YieldOp::create(b, ValueRange{n});
    }
    Value max = maxLoop.getResult(0);
    {
      OpBuilder::InsertionGuard guard(b);
      auto expLoop = scf::ForOp::create(b, c0, expertsC, c1);
      b.setInsertionPointToStart(expLoop.getBody());
      Value e = expLoop.getInductionVar();
      Value l = memref::LoadOp::create(b, logits, ValueRange{t, e});
      Value d = arith::SubFOp::create(b, l, max);
      Value x = math::ExpOp::create(b, d);
      memref::StoreOp::create(b, x, p, ValueRange{e});
    }
    auto total = scf::ForOp::create(b, c0, kC, c1, ValueRange{zero});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(total.getBody());
      Value j = total.getInductionVar();
      auto best = scf::ForOp::create(b, c0, expertsC, c1, ValueRange{taken, c0});
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(best.getBody());
        Value e = best.getInductionVar();
        Value bv = best.getRegionIterArgs()[0], bi = best.getRegionIterArgs()[1];
        Value v = memref::LoadOp::create(b, p, ValueRange{e});
        Value better = arith::CmpFOp::create(b, arith::CmpFPredicate::OGT, v, bv);
        Value nv = arith::SelectOp::create(b, better, v, bv);
        Value ni = arith::SelectOp::create(b, better, e, bi);
        scf::YieldOp::create(b, ValueRange{nv, ni});
      }
      memref::StoreOp::create(b, taken, p, ValueRange{best.getResult(1)});
      memref::StoreOp::create(b, best.getResult(0), weights, ValueRange{t, j});
      Value i32 = arith::IndexCastOp::create(b, b.getI32Type(), best.getResult(1));
      memref::StoreOp::create(b, i32, indices, ValueRange{t, j});
      Value sum = arith::AddFOp::create(b, total.getRegionIterArgs()[0], best.getResult(0));
      scf::YieldOp::create(b, ValueRange{sum});
    }
    auto norm = scf::ForOp::create(b, c0, kC, c1);
    b.setInsertionPointToStart(norm.getBody());
    Value j = norm.getInductionVar();
    Value w = memref::LoadOp::create(b, weights, ValueRange{t, j});
    Value n = arith::DivFOp::create(b, w, total.getResult(0));
    memref::StoreOp::create(b, n, weights, ValueRange{t, j});
  });
}

// Built as typed IR (KernelBuilder.h): a loop over this part's tokens, each
// of its k experts (an index of -1 is another rank's, skipped) as scalar
// loops, the products 16 wide for bf16 weights, by 16-code blocks through
// the E2M1/E4M3 tables for NVFP4.
KernelSpec megaMoE(int64_t experts, int64_t k, int64_t intermediate, int64_t latent, double eps,
                   bool nvfp4) {
  std::string name = "megamoe_" + std::to_string(experts) + "e_top" + std::to_string(k) + "_" +
                     std::to_string(intermediate) + "x" + std::to_string(latent) +
                     (nvfp4 ? "_nvfp4" : "_bf16");
  Tiling tiling;
  tiling.set("kind", nvfp4 ? "w4a16-nvfp4" : "vector-bf16")
      .set("parallel", "tokens")
      .set("experts_per_token", k);
  // z, idx, w, the three projections (bf16 [E, out, in]; NVFP4 codes, block
  // scales and global scales each), the experts' post norms, out, rows.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type f32 = b.getF32Type();
    std::vector<Type> types = {MemRefType::get({dynamic, latent}, f32),
                               MemRefType::get({dynamic, k}, b.getI32Type()),
                               MemRefType::get({dynamic, k}, f32)};
    for (auto [out, in] : {std::pair{intermediate, latent}, std::pair{intermediate, latent},
                           std::pair{latent, intermediate}}) {
      if (!nvfp4) {
        types.push_back(MemRefType::get({experts, out, in}, b.getBF16Type()));
        continue;
      }
      types.push_back(MemRefType::get({experts, out, in / 2}, b.getI8Type()));
      types.push_back(MemRefType::get({experts, out, in / 16}, b.getI8Type()));
      types.push_back(MemRefType::get({experts}, f32));
    }
    types.push_back(MemRefType::get({experts, latent}, b.getBF16Type()));
    types.push_back(MemRefType::get({dynamic, latent}, f32));
    types.push_back(b.getI64Type());
    return types;
  };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    MemRefType e2m1Type, e4m3Type;
    if (nvfp4) {
      e2m1Type = decodeTable(s, name + "_e2m1", 16, e2m1ToFloat);
      e4m3Type = decodeTable(s, name + "_e4m3", 256, e4m3ToFloat);
    }
    const unsigned perMatrix = nvfp4 ? 3 : 1;
    auto weightArg = [&](int64_t matrix) { return s.arg(3 + unsigned(matrix) * perMatrix); };
    Value z = s.arg(0), idx = s.arg(1), w = s.arg(2);
    Value postNorm = s.arg(3 + 3 * perMatrix), out = s.arg(4 + 3 * perMatrix);
    Value c0 = s.index(0), c1 = s.index(1), c2 = s.index(2), c4 = s.index(4), c8 = s.index(8);
    Value c15 = s.index(15), c16 = s.index(16), c255 = s.index(255);
    Value c0i32 = arith::ConstantIntOp::create(b, 0, 32);
    Value kC = s.index(k);
    Value inputs[3] = {s.index(latent), s.index(latent), s.index(intermediate)};
    Value inter = s.index(intermediate), latentC = s.index(latent);
    Value latentF = arith::ConstantFloatOp::create(b, f32, APFloat(float(latent)));
    Value epsC = arith::ConstantFloatOp::create(b, f32, APFloat(float(eps)));
    Value zeroF = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value oneF = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value rows = s.argIndex(5 + 3 * perMatrix);
    Value h = memref::AllocaOp::create(b, MemRefType::get({intermediate}, f32));
    Value y = memref::AllocaOp::create(b, MemRefType::get({latent}, f32));
    Value e2m1, e4m3;
    if (nvfp4) {
      e2m1 = memref::GetGlobalOp::create(b, e2m1Type, name + "_e2m1");
      e4m3 = memref::GetGlobalOp::create(b, e4m3Type, name + "_e4m3");
    }
    unsigned n = s.func.getNumArguments();
    Value part = s.argIndex(n - 2);
    Value parts = s.argIndex(n - 1);
    auto [begin, end] = partRange(b, rows, part, parts);
    auto tokens = scf::ForOp::create(b, begin, end, c1);
    b.setInsertionPointToStart(tokens.getBody());
    Value t = tokens.getInductionVar();
    {
      auto clear = scf::ForOp::create(b, c0, latentC, c1);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(clear.getBody());
      memref::StoreOp::create(b, zeroF, out, ValueRange{t, clear.getInductionVar()});
    }
    auto choices = scf::ForOp::create(b, c0, kC, c1);
    b.setInsertionPointToStart(choices.getBody());
    Value j = choices.getInductionVar();
    Value e32 = memref::LoadOp::create(b, idx, ValueRange{t, j});
    Value e = arith::IndexCastOp::create(b, b.getIndexType(), e32);
    // -1: another rank's expert (expert parallelism), skipped.
    Value here = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e32, c0i32);
    auto ifHere = scf::IfOp::create(b, here, /*withElse=*/false);
    b.setInsertionPointToStart(&ifHere.getThenRegion().front());
    Value weight = memref::LoadOp::create(b, w, ValueRange{t, j});

    // Row o of projection `matrix` times the vector `x` (z's row t, or h):
    // `at(c)` its indices at column c.
    auto product = [&](int64_t matrix, Value o, Value x,
                       const std::function<SmallVector<Value>(Value)> &at) -> Value {
      Value wm = weightArg(matrix);
      Value in = inputs[matrix];
      if (!nvfp4) {
        auto v16 = VectorType::get({16}, f32);
        Value zv = arith::ConstantOp::create(b, v16, DenseElementsAttr::get(v16, 0.0f));
        auto loop = scf::ForOp::create(b, c0, in, c16, ValueRange{zv});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          Value c = loop.getInductionVar();
          Value xv = vector::LoadOp::create(b, v16, x, at(c));
          Value wb = vector::LoadOp::create(b, VectorType::get({16}, b.getBF16Type()), wm,
                                            ValueRange{e, o, c});
          Value wv = arith::ExtFOp::create(b, v16, wb);
          Value pr = arith::MulFOp::create(b, xv, wv);
          scf::YieldOp::create(
              b, ValueRange{arith::AddFOp::create(b, loop.getRegionIterArgs()[0], pr)});
        }
        return vector::ReductionOp::create(b, vector::CombiningKind::ADD, loop.getResult(0));
      }
      Value scales = s.arg(4 + unsigned(matrix) * perMatrix);
      Value globals = s.arg(5 + unsigned(matrix) * perMatrix);
      Value glob = memref::LoadOp::create(b, globals, ValueRange{e});
      Value blocks = arith::DivUIOp::create(b, in, c16);
      auto loop = scf::ForOp::create(b, c0, blocks, c1, ValueRange{zeroF});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value blk = loop.getInductionVar();
        Value sb = memref::LoadOp::create(b, scales, ValueRange{e, o, blk});
        Value sbi = arith::IndexCastOp::create(b, b.getIndexType(), sb);
        Value sbu = arith::AndIOp::create(b, sbi, c255);
        Value scale = memref::LoadOp::create(b, e4m3, ValueRange{sbu});
        auto inner = scf::ForOp::create(b, c0, c8, c1, ValueRange{zeroF});
        {
          OpBuilder::InsertionGuard guard2(b);
          b.setInsertionPointToStart(inner.getBody());
          Value byteCol = arith::MulIOp::create(b, blk, c8);
          Value col = arith::AddIOp::create(b, byteCol, inner.getInductionVar());
          Value byte = memref::LoadOp::create(b, wm, ValueRange{e, o, col});
          Value bi = arith::IndexCastOp::create(b, b.getIndexType(), byte);
          Value bu = arith::AndIOp::create(b, bi, c255);
          Value loI = arith::AndIOp::create(b, bu, c15);
          Value hiI = arith::ShRUIOp::create(b, bu, c4);
          Value lo = memref::LoadOp::create(b, e2m1, ValueRange{loI});
          Value hi = memref::LoadOp::create(b, e2m1, ValueRange{hiI});
          Value x0i = arith::MulIOp::create(b, col, c2);
          Value x1i = arith::AddIOp::create(b, x0i, c1);
          Value x0 = memref::LoadOp::create(b, x, at(x0i));
          Value x1 = memref::LoadOp::create(b, x, at(x1i));
          Value a0 = arith::MulFOp::create(b, lo, x0);
          Value a1 = arith::MulFOp::create(b, hi, x1);
          Value a = arith::AddFOp::create(b, a0, a1);
          scf::YieldOp::create(
              b, ValueRange{arith::AddFOp::create(b, inner.getRegionIterArgs()[0], a)});
        }
        Value scaled = arith::MulFOp::create(b, inner.getResult(0), scale);
        scf::YieldOp::create(
            b, ValueRange{arith::AddFOp::create(b, loop.getRegionIterArgs()[0], scaled)});
      }
      return arith::MulFOp::create(b, loop.getResult(0), glob);
    };
    auto ofZ = [&](Value c) { return SmallVector<Value>{t, c}; };
    auto ofH = [&](Value c) { return SmallVector<Value>{c}; };

    // h = silu(gate_e z) * up_e z
    {
      auto rowsLoop = scf::ForOp::create(b, c0, inter, c1);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(rowsLoop.getBody());
      Value o = rowsLoop.getInductionVar();
      Value gateDot = product(0, o, z, ofZ);
      Value upDot = product(1, o, z, ofZ);
      Value g = arith::AddFOp::create(b, gateDot, zeroF);
      Value u = arith::AddFOp::create(b, upDot, zeroF);
      memref::StoreOp::create(b, swiGlu(b, g, u, oneF), h, ValueRange{o});
    }
    // y = down_e h, then RMSNorm with the expert's own weight, then the
    // weighted sum into the token's output.
    auto downLoop = scf::ForOp::create(b, c0, latentC, c1, ValueRange{zeroF});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(downLoop.getBody());
      Value o = downLoop.getInductionVar();
      Value yv = arith::AddFOp::create(b, product(2, o, h, ofH), zeroF);
      memref::StoreOp::create(b, yv, y, ValueRange{o});
      Value sq = arith::MulFOp::create(b, yv, yv);
      scf::YieldOp::create(
          b, ValueRange{arith::AddFOp::create(b, downLoop.getRegionIterArgs()[0], sq)});
    }
    Value mean = arith::DivFOp::create(b, downLoop.getResult(0), latentF);
    Value me = arith::AddFOp::create(b, mean, epsC);
    Value rms = math::SqrtOp::create(b, me);
    Value inv = arith::DivFOp::create(b, oneF, rms);
    Value scale = arith::MulFOp::create(b, inv, weight);
    auto sum = scf::ForOp::create(b, c0, latentC, c1);
    b.setInsertionPointToStart(sum.getBody());
    Value c = sum.getInductionVar();
    Value yv = memref::LoadOp::create(b, y, ValueRange{c});
    Value pb = memref::LoadOp::create(b, postNorm, ValueRange{e, c});
    Value pf = arith::ExtFOp::create(b, f32, pb);
    Value yn = arith::MulFOp::create(b, yv, pf);
    Value ys = arith::MulFOp::create(b, yn, scale);
    Value o0 = memref::LoadOp::create(b, out, ValueRange{t, c});
    memref::StoreOp::create(b, arith::AddFOp::create(b, o0, ys), out, ValueRange{t, c});
  });
}

} // namespace kiln::kernels
