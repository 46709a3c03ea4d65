// The latent MoE: the softmax top-k router, and the MegaMoE stage for one
// device (every expert local): for each token and selected expert, gate/up
// products, SwiGLU, the down product, the expert's RMSNorm and the weighted
// sum. NVFP4 experts are decoded inside the products (E2M1 codes and E4M3
// block scales through lookup tables, times the expert's global scale), so
// no bf16 copy of the weights ever exists.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"

#include "runtime/core/Float.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <cstdint>
#include <limits>
#include <string>

namespace kiln::kernels {

using namespace mlir;

// The router, built as typed IR (KernelBuilder.h): per token, the softmax
// numerators, then k rounds of argmax (ties to the lower index; chosen
// entries become -1), then the chosen weights renormalised.
KernelSpec routerTopK(int64_t experts, int64_t k) {
  std::string name = "router_top" + std::to_string(k) + "_of_" + std::to_string(experts);
  Tiling tiling;
  tiling.set("kind", "rows").set("parallel", "tokens");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, experts}, b.getF32Type()),
            MemRefType::get({dynamic, k}, b.getF32Type()),
            MemRefType::get({dynamic, k}, b.getI32Type()), b.getI64Type()};
  };
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

KernelSpec megaMoE(int64_t experts, int64_t k, int64_t intermediate, int64_t latent, double eps,
                   bool nvfp4) {
  std::string name = "megamoe_" + std::to_string(experts) + "e_top" + std::to_string(k) + "_" +
                     std::to_string(intermediate) + "x" + std::to_string(latent) +
                     (nvfp4 ? "_nvfp4" : "_bf16");
  std::string E = std::to_string(experts), I = std::to_string(intermediate),
              L = std::to_string(latent);
  // Weight arguments and the product of row %o of one projection with a
  // vector, for both formats. @@W@@ names the projection (gate, up, down),
  // @@IN@@ its input width, @@OUT@@ its output width, @@X@@ the input memref.
  std::string weightArgs, dot;
  if (!nvfp4) {
    weightArgs = "%gate: memref<@@E@@x@@I@@x@@L@@xbf16>, %up: memref<@@E@@x@@I@@x@@L@@xbf16>, "
                 "%down: memref<@@E@@x@@L@@x@@I@@xbf16>";
    dot = R"(
          %zv_@@W@@ = arith.constant dense<0.0> : vector<16xf32>
          %accv_@@W@@ = scf.for %c = %c0 to %in_@@W@@ step %c16 iter_args(%s = %zv_@@W@@) -> (vector<16xf32>) {
            %xv = vector.load @@X@@[@@XI@@] : @@XT@@, vector<16xf32>
            %wb = vector.load %@@W@@[%e, %o, %c] : memref<@@E@@x@@OUT@@x@@IN@@xbf16>, vector<16xbf16>
            %wv = arith.extf %wb : vector<16xbf16> to vector<16xf32>
            %pr = arith.mulf %xv, %wv : vector<16xf32>
            %ns = arith.addf %s, %pr : vector<16xf32>
            scf.yield %ns : vector<16xf32>
          }
          %dot_@@W@@ = vector.reduction <add>, %accv_@@W@@ : vector<16xf32> into f32
)";
  } else {
    weightArgs = "%gate: memref<@@E@@x@@I@@x@@LH@@xi8>, %gate_s: memref<@@E@@x@@I@@x@@LS@@xi8>, "
                 "%gate_g: memref<@@E@@xf32>, "
                 "%up: memref<@@E@@x@@I@@x@@LH@@xi8>, %up_s: memref<@@E@@x@@I@@x@@LS@@xi8>, %up_g: "
                 "memref<@@E@@xf32>, "
                 "%down: memref<@@E@@x@@L@@x@@IH@@xi8>, %down_s: memref<@@E@@x@@L@@x@@IS@@xi8>, "
                 "%down_g: memref<@@E@@xf32>";
    dot = R"(
          %glob_@@W@@ = memref.load %@@W@@_g[%e] : memref<@@E@@xf32>
          %blocks_@@W@@ = arith.divui %in_@@W@@, %c16 : index
          %dot_@@W@@ = scf.for %b = %c0 to %blocks_@@W@@ step %c1 iter_args(%s = %zero_f) -> (f32) {
            %sb = memref.load %@@W@@_s[%e, %o, %b] : memref<@@E@@x@@OUT@@x@@INS@@xi8>
            %sbi = arith.index_cast %sb : i8 to index
            %sbu = arith.andi %sbi, %c255 : index
            %scale = memref.load %e4m3[%sbu] : memref<256xf32>
            %blk = scf.for %i = %c0 to %c8 step %c1 iter_args(%ps = %zero_f) -> (f32) {
              %byte_col = arith.muli %b, %c8 : index
              %col = arith.addi %byte_col, %i : index
              %byte = memref.load %@@W@@[%e, %o, %col] : memref<@@E@@x@@OUT@@x@@INH@@xi8>
              %bi = arith.index_cast %byte : i8 to index
              %bu = arith.andi %bi, %c255 : index
              %lo_i = arith.andi %bu, %c15 : index
              %hi_i = arith.shrui %bu, %c4 : index
              %lo = memref.load %e2m1[%lo_i] : memref<16xf32>
              %hi = memref.load %e2m1[%hi_i] : memref<16xf32>
              %x0i = arith.muli %col, %c2 : index
              %x1i = arith.addi %x0i, %c1 : index
              %x0 = memref.load @@X@@[@@XI0@@] : @@XT@@
              %x1 = memref.load @@X@@[@@XI1@@] : @@XT@@
              %a0 = arith.mulf %lo, %x0 : f32
              %a1 = arith.mulf %hi, %x1 : f32
              %a = arith.addf %a0, %a1 : f32
              %n = arith.addf %ps, %a : f32
              scf.yield %n : f32
            }
            %scaled = arith.mulf %blk, %scale : f32
            %ns = arith.addf %s, %scaled : f32
            scf.yield %ns : f32
          }
          %dotg_@@W@@ = arith.mulf %dot_@@W@@, %glob_@@W@@ : f32
)";
  }
  auto product = [&](const std::string &w, const std::string &in, const std::string &out,
                     const std::string &x, const std::string &xt, const std::string &xi,
                     const std::string &xi0, const std::string &xi1) {
    return fillTemplate(dot, {{"W", w},
                              {"IN", in},
                              {"OUT", out},
                              {"INS", std::to_string(std::stoll(in) / 16)},
                              {"INH", std::to_string(std::stoll(in) / 2)},
                              {"X", x},
                              {"XT", xt},
                              {"XI", xi},
                              {"XI0", xi0},
                              {"XI1", xi1},
                              {"E", E}});
  };
  std::string zrow = "memref<?x" + L + "xf32>";
  std::string gateDot = product("gate", L, I, "%z", zrow, "%t, %c", "%t, %x0i", "%t, %x1i");
  std::string upDot = product("up", L, I, "%z", zrow, "%t, %c", "%t, %x0i", "%t, %x1i");
  std::string downDot = product("down", I, L, "%h", "memref<" + I + "xf32>", "%c", "%x0i", "%x1i");
  std::string result = nvfp4 ? "%dotg_" : "%dot_";

  std::string luts = nvfp4 ? lookupTable(name + "_e2m1", 16, e2m1ToFloat) +
                                 lookupTable(name + "_e4m3", 256, e4m3ToFloat)
                           : "";
  std::string lutLoads = nvfp4 ? "%e2m1 = memref.get_global @" + name +
                                     "_e2m1 : memref<16xf32>\n"
                                     "  %e4m3 = memref.get_global @" +
                                     name + "_e4m3 : memref<256xf32>\n"
                               : "";
  std::string body =
      luts + fillTemplate(
                 R"(
func.func @@@name@@(%z: memref<?x@@L@@xf32>, %idx: memref<?x@@K@@xi32>, %w: memref<?x@@K@@xf32>,
                    @@wargs@@, %pn: memref<@@E@@x@@L@@xbf16>, %out: memref<?x@@L@@xf32>,
                    %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "@@kind@@", parallel = "tokens", experts_per_token = @@K@@ : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c15 = arith.constant 15 : index
  %c16 = arith.constant 16 : index
  %c255 = arith.constant 255 : index
  %c0_i32 = arith.constant 0 : i32
  %k = arith.constant @@K@@ : index
  %in_gate = arith.constant @@L@@ : index
  %in_up = arith.constant @@L@@ : index
  %in_down = arith.constant @@I@@ : index
  %inter = arith.constant @@I@@ : index
  %latent = arith.constant @@L@@ : index
  %latentf = arith.constant @@Lf@@ : f32
  %eps = arith.constant @@eps@@ : f32
  %zero_f = arith.constant 0.0 : f32
  %one_f = arith.constant 1.0 : f32
  %rows = arith.index_cast %rows_i : i64 to index
  %h = memref.alloca() : memref<@@I@@xf32>
  %y = memref.alloca() : memref<@@L@@xf32>
  @@luts@@
  @@range@@
  scf.for %t = %tbegin to %tend step %c1 {
    scf.for %c = %c0 to %latent step %c1 {
      memref.store %zero_f, %out[%t, %c] : memref<?x@@L@@xf32>
    }
    scf.for %j = %c0 to %k step %c1 {
      // -1: another rank's expert (expert parallelism), skipped.
      %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
      %e = arith.index_cast %e32 : i32 to index
      %here = arith.cmpi sge, %e32, %c0_i32 : i32
      scf.if %here {
      %weight = memref.load %w[%t, %j] : memref<?x@@K@@xf32>
      // h = silu(gate_e z) * up_e z
      scf.for %o = %c0 to %inter step %c1 {
@@gate@@
@@up@@
        %g = arith.addf @@res@@gate, %zero_f : f32
        %u = arith.addf @@res@@up, %zero_f : f32
        %ng = arith.negf %g : f32
        %ex = math.exp %ng : f32
        %den = arith.addf %one_f, %ex : f32
        %sig = arith.divf %g, %den : f32
        %hv = arith.mulf %sig, %u : f32
        memref.store %hv, %h[%o] : memref<@@I@@xf32>
      }
      // y = down_e h, then RMSNorm with the expert's own weight, then the
      // weighted sum into the token's output.
      %sumsq = scf.for %o = %c0 to %latent step %c1 iter_args(%ss = %zero_f) -> (f32) {
@@down@@
        %yv = arith.addf @@res@@down, %zero_f : f32
        memref.store %yv, %y[%o] : memref<@@L@@xf32>
        %sq = arith.mulf %yv, %yv : f32
        %nss = arith.addf %ss, %sq : f32
        scf.yield %nss : f32
      }
      %mean = arith.divf %sumsq, %latentf : f32
      %me = arith.addf %mean, %eps : f32
      %rms = math.sqrt %me : f32
      %inv = arith.divf %one_f, %rms : f32
      %scale = arith.mulf %inv, %weight : f32
      scf.for %c = %c0 to %latent step %c1 {
        %yv = memref.load %y[%c] : memref<@@L@@xf32>
        %pb = memref.load %pn[%e, %c] : memref<@@E@@x@@L@@xbf16>
        %pf = arith.extf %pb : bf16 to f32
        %yn = arith.mulf %yv, %pf : f32
        %ys = arith.mulf %yn, %scale : f32
        %o0 = memref.load %out[%t, %c] : memref<?x@@L@@xf32>
        %o1 = arith.addf %o0, %ys : f32
        memref.store %o1, %out[%t, %c] : memref<?x@@L@@xf32>
      }
      }
    }
  }
  return
}
)",
                 {{"name", name},
                  {"wargs", fillTemplate(weightArgs, {{"E", E},
                                                      {"I", I},
                                                      {"L", L},
                                                      {"LH", std::to_string(latent / 2)},
                                                      {"LS", std::to_string(latent / 16)},
                                                      {"IH", std::to_string(intermediate / 2)},
                                                      {"IS", std::to_string(intermediate / 16)}})},
                  {"E", E},
                  {"I", I},
                  {"L", L},
                  {"K", std::to_string(k)},
                  {"Lf", floatLiteral(double(latent))},
                  {"eps", floatLiteral(eps)},
                  {"kind", nvfp4 ? "w4a16-nvfp4" : "vector-bf16"},
                  {"luts", lutLoads},
                  {"range", partRange("%rows", "t")},
                  {"gate", gateDot},
                  {"up", upDot},
                  {"down", downDot},
                  {"res", result}});
  return textKernel(name, "kiln.megamoe", body);
}

} // namespace kiln::kernels
