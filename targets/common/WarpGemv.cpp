// GPU GEMV-shaped products, one warp per output element: the dense linear
// (bf16 weights) and the latent MoE's expert stage split in three launches
// (gate/up with SwiGLU, down, then per-expert RMSNorm and the weighted sum).
// Decode reads every weight once, so these kernels are built to stream
// weights: each lane loads its own 16 contiguous bytes of a row per step,
// NVFP4 codes are decoded in registers (WarpSnippets.h), and the warp sums
// its lanes with shuffles. Rows of the input beyond the first re-read the
// weights from cache; prefill-shaped products belong to tensor-core kernels.
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// Weight arguments of one expert projection [E, out, in] and its row dot for
// row (%e, %o) against x[xIdx, :].
struct ExpertProjection {
  std::string args;
  std::string dot;
};

ExpertProjection expertProjection(const std::string &w, int64_t experts, int64_t out, int64_t in,
                                  bool nvfp4, const std::string &x, const std::string &xType,
                                  const std::string &xIdx) {
  std::string E = str(experts), O = str(out);
  if (!nvfp4) {
    std::string type = "memref<" + E + "x" + O + "x" + str(in) + "xbf16>";
    return {"%" + w + ": " + type,
            warp::bf16RowDot("%" + w, type, "%e, %o", x, xType, xIdx, in, w + "_dot")};
  }
  std::string type = "memref<" + E + "x" + O + "x" + str(in / 2) + "xi8>";
  std::string scales = "memref<" + E + "x" + O + "x" + str(in / 16) + "xi8>";
  std::string global = "memref<" + E + "xf32>";
  std::string load = "    %" + w + "_glob = memref.load %" + w + "_g[%e] : " + global + "\n";
  return {"%" + w + ": " + type + ", %" + w + "_s: " + scales + ", %" + w + "_g: " + global,
          load + warp::nvfp4RowDot("%" + w, type, "%" + w + "_s", scales, "%e, %o",
                                   "%" + w + "_glob", x, xType, xIdx, in, w + "_dot")};
}

std::string formatSuffix(bool nvfp4) { return nvfp4 ? "_nvfp4" : "_bf16"; }

} // namespace

bool warpGemvFits(int64_t k) { return k % 8 == 0; }
bool warpMoEFits(int64_t intermediate, int64_t latent) {
  return intermediate % 32 == 0 && latent % 32 == 0;
}

KernelSpec linearWarp(int64_t n, int64_t k) {
  std::string name = "linear_warp_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>", wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: memref<?x@@n@@xf32>, %first_i: i64, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-gemv", parallel = "n"}} {
@@ids@@
  %ndim = arith.constant @@n@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %first = arith.index_cast %first_i : i64 to index
  scf.for %o = %warp to %ndim step %warps {
    scf.for %r = %c0 to %rows step %c1 {
      %xr = arith.addi %first, %r : index
@@dot@@
@@sum@@
      %lead = arith.cmpi eq, %lane, %c0 : index
      scf.if %lead {
        memref.store %y_sum, %y[%r, %o] : memref<?x@@n@@xf32>
      }
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"xt", xt},
                                   {"wt", wt},
                                   {"n", str(n)},
                                   {"ids", warp::warpIds()},
                                   {"dot", warp::bf16RowDot("%w", wt, "%o", "%x", xt, "%xr", k, "y_dot")},
                                   {"sum", warp::warpSum("y_dot", "y_sum")}});
  return KernelSpec{name, "kiln.linear", "{\"kind\": \"warp-gemv\", \"parallel\": \"n\"}", body};
}

KernelSpec expertGateUpWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            bool nvfp4) {
  std::string name = "expert_gateup_warp_" + str(experts) + "e_top" + str(k) + "_" +
                     str(intermediate) + "x" + str(latent) + formatSuffix(nvfp4);
  std::string zt = "memref<?x" + str(latent) + "xf32>";
  ExpertProjection gate = expertProjection("gate", experts, intermediate, latent, nvfp4, "%z", zt, "%t");
  ExpertProjection up = expertProjection("up", experts, intermediate, latent, nvfp4, "%z", zt, "%t");
  std::string body = fillTemplate(R"(
func.func @@@name@@(%z: @@zt@@, %idx: memref<?x@@K@@xi32>, @@gargs@@, @@uargs@@,
                    %h: memref<?x@@K@@x@@I@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv@@fmt@@", parallel = "tokens*experts_per_token*intermediate"}} {
@@ids@@
  %kk = arith.constant @@K@@ : index
  %inter = arith.constant @@I@@ : index
  %per_token = arith.constant @@KI@@ : index
  %one_f = arith.constant 1.0 : f32
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %per_token : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %per_token : index
    %rest = arith.remui %item, %per_token : index
    %j = arith.divui %rest, %inter : index
    %o = arith.remui %rest, %inter : index
    %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
    %e = arith.index_cast %e32 : i32 to index
@@gdot@@
@@udot@@
@@gsum@@
@@usum@@
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
      // h = silu(gate z) * (up z)
      %ng = arith.negf %g : f32
      %ex = math.exp %ng : f32
      %den = arith.addf %one_f, %ex : f32
      %sig = arith.divf %g, %den : f32
      %hv = arith.mulf %sig, %u : f32
      memref.store %hv, %h[%t, %j, %o] : memref<?x@@K@@x@@I@@xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"zt", zt},
                                   {"K", str(k)},
                                   {"I", str(intermediate)},
                                   {"KI", str(k * intermediate)},
                                   {"fmt", formatSuffix(nvfp4)},
                                   {"gargs", gate.args},
                                   {"uargs", up.args},
                                   {"ids", warp::warpIds()},
                                   {"gdot", gate.dot},
                                   {"udot", up.dot},
                                   {"gsum", warp::warpSum("gate_dot", "g")},
                                   {"usum", warp::warpSum("up_dot", "u")}});
  return KernelSpec{name, "kiln.megamoe",
                    "{\"kind\": \"warp-gemv" + formatSuffix(nvfp4) +
                        "\", \"parallel\": \"tokens*experts_per_token*intermediate\"}",
                    body};
}

KernelSpec expertDownWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                          bool nvfp4) {
  std::string name = "expert_down_warp_" + str(experts) + "e_top" + str(k) + "_" +
                     str(latent) + "x" + str(intermediate) + formatSuffix(nvfp4);
  std::string ht = "memref<?x" + str(k) + "x" + str(intermediate) + "xf32>";
  ExpertProjection down = expertProjection("down", experts, latent, intermediate, nvfp4, "%h", ht, "%t, %j");
  std::string body = fillTemplate(R"(
func.func @@@name@@(%h: @@ht@@, %idx: memref<?x@@K@@xi32>, @@dargs@@,
                    %y: memref<?x@@K@@x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv@@fmt@@", parallel = "tokens*experts_per_token*latent"}} {
@@ids@@
  %latent = arith.constant @@L@@ : index
  %per_token = arith.constant @@KL@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %per_token : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %per_token : index
    %rest = arith.remui %item, %per_token : index
    %j = arith.divui %rest, %latent : index
    %o = arith.remui %rest, %latent : index
    %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
    %e = arith.index_cast %e32 : i32 to index
@@ddot@@
@@dsum@@
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
      memref.store %yv, %y[%t, %j, %o] : memref<?x@@K@@x@@L@@xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"ht", ht},
                                   {"K", str(k)},
                                   {"L", str(latent)},
                                   {"KL", str(k * latent)},
                                   {"fmt", formatSuffix(nvfp4)},
                                   {"dargs", down.args},
                                   {"ids", warp::warpIds()},
                                   {"ddot", down.dot},
                                   {"dsum", warp::warpSum("down_dot", "yv")}});
  return KernelSpec{name, "kiln.megamoe",
                    "{\"kind\": \"warp-gemv" + formatSuffix(nvfp4) +
                        "\", \"parallel\": \"tokens*experts_per_token*latent\"}",
                    body};
}

KernelSpec expertNormCombineWarp(int64_t experts, int64_t k, int64_t latent, double eps) {
  std::string name = "expert_norm_combine_warp_" + str(experts) + "e_top" + str(k) + "_" + str(latent);
  std::string yt = "memref<?x" + str(k) + "x" + str(latent) + "xf32>";
  // One warp per token: the K sums of squares (lanes over the latent width),
  // then out = sum_j weight_j * rsqrt(mean(y_j^2) + eps) * post_norm_e * y_j.
  std::string body = fillTemplate(R"(
func.func @@@name@@(%y: @@yt@@, %idx: memref<?x@@K@@xi32>, %w: memref<?x@@K@@xf32>, %pn: memref<@@E@@x@@L@@xbf16>,
                    %out: memref<?x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens"}} {
@@ids@@
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %kk = arith.constant @@K@@ : index
  %latent = arith.constant @@L@@ : index
  %latentf = arith.constant @@Lf@@ : f32
  %eps = arith.constant @@eps@@ : f32
  %one_f = arith.constant 1.0 : f32
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %rows = arith.index_cast %rows_i : i64 to index
  %l4 = arith.muli %lane, %c4 : index
  %scales = memref.alloca() : memref<@@K@@xf32>
  scf.for %t = %warp to %rows step %warps {
    scf.for %j = %c0 to %kk step %c1 {
      %sqv = scf.for %c = %l4 to %latent step %c128 iter_args(%s = %zero_v) -> (vector<4xf32>) {
        %yv = vector.load %y[%t, %j, %c] {alignment = 16} : @@yt@@, vector<4xf32>
        %n = vector.fma %yv, %yv, %s : vector<4xf32>
        scf.yield %n : vector<4xf32>
      }
      %sq = vector.reduction <add>, %sqv : vector<4xf32> into f32
@@sum@@
      %mean = arith.divf %ss, %latentf : f32
      %me = arith.addf %mean, %eps : f32
      %rms = math.sqrt %me : f32
      %wj = memref.load %w[%t, %j] : memref<?x@@K@@xf32>
      %scale = arith.divf %wj, %rms : f32
      memref.store %scale, %scales[%j] : memref<@@K@@xf32>
    }
    scf.for %c = %l4 to %latent step %c128 {
      %acc = scf.for %j = %c0 to %kk step %c1 iter_args(%a = %zero_v) -> (vector<4xf32>) {
        %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
        %e = arith.index_cast %e32 : i32 to index
        %yv = vector.load %y[%t, %j, %c] {alignment = 16} : @@yt@@, vector<4xf32>
        %pb = vector.load %pn[%e, %c] : memref<@@E@@x@@L@@xbf16>, vector<4xbf16>
        %pf = arith.extf %pb : vector<4xbf16> to vector<4xf32>
        %sj = memref.load %scales[%j] : memref<@@K@@xf32>
        %sv = vector.broadcast %sj : f32 to vector<4xf32>
        %yn = arith.mulf %yv, %pf : vector<4xf32>
        %n = vector.fma %yn, %sv, %a : vector<4xf32>
        scf.yield %n : vector<4xf32>
      }
      vector.store %acc, %out[%t, %c] {alignment = 16} : memref<?x@@L@@xf32>, vector<4xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"yt", yt},
                                   {"E", str(experts)},
                                   {"K", str(k)},
                                   {"L", str(latent)},
                                   {"Lf", floatLiteral(double(latent))},
                                   {"eps", floatLiteral(eps)},
                                   {"ids", warp::warpIds()},
                                   {"sum", warp::warpSum("sq", "ss")}});
  return KernelSpec{name, "kiln.megamoe", "{\"kind\": \"warp-rows\", \"parallel\": \"tokens\"}", body};
}

} // namespace kiln::kernels
