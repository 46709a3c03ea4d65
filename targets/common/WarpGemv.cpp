// GPU GEMV-shaped products, one warp per output element: the dense linear
// (bf16 weights) and the products of the latent MoE's expert stage (gate/up
// with SwiGLU, then down; GpuRowKernels.cpp has the per-expert RMSNorm and
// the weighted sum).
// Decode reads every weight once, so these kernels are built to stream
// weights: each lane loads its own 16 contiguous bytes of a row per step,
// NVFP4 codes are decoded in registers (WarpSnippets.h), and the warp sums
// its lanes with shuffles. Rows of the input beyond the first re-read the
// weights from cache; prefill-shaped products belong to tensor-core kernels.
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

// The head of an expert-stage loop: a warp per (token t, selected expert j,
// group of `rowsPerWarp` output rows %o0 ..), %e the expert. The kernel
// defines %groups (groups a selected expert), %per_token and the index
// constants %c1 .. %c<rowsPerWarp>, and closes the loop.
std::string expertItemLoop(int64_t rowsPerWarp, int64_t k) {
  std::string text = R"(
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %per_token : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %per_token : index
    %rest = arith.remui %item, %per_token : index
    %j = arith.divui %rest, %groups : index
    %group = arith.remui %rest, %groups : index
)";
  text += "    %o0 = arith.muli %group, %c" + str(rowsPerWarp) + " : index\n";
  for (int64_t r = 1; r < rowsPerWarp; ++r)
    text += "    %o" + str(r) + " = arith.addi %o0, %c" + str(r) + " : index\n";
  // An index of -1 (another rank's expert, weight 0) reads expert 0.
  return text + "    %e32r = memref.load %idx[%t, %j] : memref<?x" + str(k) +
         "xi32>\n    %e0_i32 = arith.constant 0 : i32\n"
         "    %e32 = arith.maxsi %e32r, %e0_i32 : i32\n"
         "    %e = arith.index_cast %e32 : i32 to index\n";
}

std::string formatSuffix(bool nvfp4) { return nvfp4 ? "_nvfp4" : "_bf16"; }

} // namespace

bool warpGemvFits(int64_t k) { return k % 8 == 0; }
bool warpMoEFits(int64_t intermediate, int64_t latent) {
  return intermediate % 32 == 0 && latent % 32 == 0;
}

KernelSpec linearWarp(int64_t n, int64_t k) {
  std::string name = "linear_warp_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string body = fillTemplate(
      R"(
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
       {"dot", warp::rowsDot({{"%w", wt, "%o", "", "", ""}}, false, "%x", xt, "%xr", k, {"y_dot"})},
       {"sum", warp::warpSum("y_dot", "y_sum")}});
  return textKernel(name, "kiln.linear", body);
}

KernelSpec linearWarpTokens(int64_t n, int64_t k, int64_t tokens) {
  // A warp per output row, `tokens` rows of x at a time: each weight load
  // serves them all (batched decode reads the weights once, not per token).
  std::string name = "linear_warp_tokens" + str(tokens) + "_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::vector<warp::WeightRow> rows;
  std::vector<std::string> outs;
  std::string rowIdx, stores;
  for (int64_t i = 0; i < tokens; ++i) {
    std::string I = str(i);
    rows.push_back({"%w", wt, "%o", "", "", "", "%xr" + I});
    outs.push_back("y_dot" + I);
    rowIdx += "      %r_at" + I + " = arith.addi %r0, %c" + I + "_i : index\n" + "      %xr" + I +
              " = arith.minui %r_at" + I + ", %last : index\n";
    stores += warp::warpSum("y_dot" + I, "y_sum" + I) + fillTemplate(R"(
      %in@@I@@ = arith.cmpi ult, %r_at@@I@@, %rows : index
      %st@@I@@ = arith.andi %lead, %in@@I@@ : i1
      scf.if %st@@I@@ {
        memref.store %y_sum@@I@@, %y[%r_at@@I@@, %o] : memref<?x@@n@@xf32>
      }
)",
                                                                     {{"I", I}, {"n", str(n)}});
  }
  std::string consts;
  for (int64_t i = 0; i < tokens; ++i)
    consts += "  %c" + str(i) + "_i = arith.constant " + str(i) + " : index\n";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: memref<?x@@n@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-gemv-tokens", parallel = "n", tokens = @@T@@ : i64}} {
@@ids@@
@@consts@@
  %group = arith.constant @@T@@ : index
  %ndim = arith.constant @@n@@ : index
  %rows = arith.index_cast %rows_i : i64 to index
  %last = arith.subi %rows, %c1 : index
  %lead = arith.cmpi eq, %lane, %c0 : index
  scf.for %o = %warp to %ndim step %warps {
    scf.for %r0 = %c0 to %rows step %group {
@@rowIdx@@
@@dot@@
@@stores@@
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"xt", xt},
                                   {"wt", wt},
                                   {"n", str(n)},
                                   {"T", str(tokens)},
                                   {"ids", warp::warpIds()},
                                   {"consts", consts},
                                   {"rowIdx", rowIdx},
                                   {"dot", warp::rowsDot(rows, false, "%x", xt, "%xr0", k, outs)},
                                   {"stores", stores}});
  return textKernel(name, "kiln.linear", body);
}

bool splitGemvFits(int64_t n, int64_t k) { return n < 4096 && k % 1024 == 0; }

KernelSpec linearSplitBlock(int64_t n, int64_t k) {
  // A block of four warps per output row, each warp a quarter of k; the
  // quarters summed through shared memory in order.
  std::string name = "linear_split_block_" + str(n) + "x" + str(k);
  std::string xt = "memref<?x" + str(k) + "xf32>",
              wt = "memref<" + str(n) + "x" + str(k) + "xbf16>";
  std::string body =
      "memref.global \"private\" @" + name +
      "_smem : memref<4xf32, #gpu.address_space<workgroup>>\n" +
      fillTemplate(R"(
func.func @@@name@@(%x: @@xt@@, %w: @@wt@@, %y: memref<?x@@n@@xf32>, %first_i: i64, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "split-k-gemv", splits = 4 : i64, parallel = "n"}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c32 = arith.constant 32 : index
  %quarter = arith.constant @@k4@@ : index
  %tid = gpu.thread_id x
  %o = gpu.block_id x
  %lane = arith.remui %tid, %c32 : index
  %wid = arith.divui %tid, %c32 : index
  %col = arith.muli %wid, %quarter : index
  %smem = memref.get_global @@@name@@_smem : memref<4xf32, #gpu.address_space<workgroup>>
  %rows = arith.index_cast %rows_i : i64 to index
  %first = arith.index_cast %first_i : i64 to index
  %lead = arith.cmpi eq, %lane, %c0 : index
  %first_thread = arith.cmpi eq, %tid, %c0 : index
  scf.for %r = %c0 to %rows step %c1 {
    %xr = arith.addi %first, %r : index
@@dot@@
@@sum@@
    scf.if %lead {
      memref.store %part_sum, %smem[%wid] : memref<4xf32, #gpu.address_space<workgroup>>
    }
    gpu.barrier
    scf.if %first_thread {
      %p0 = memref.load %smem[%c0] : memref<4xf32, #gpu.address_space<workgroup>>
      %p1 = memref.load %smem[%c1] : memref<4xf32, #gpu.address_space<workgroup>>
      %p2 = memref.load %smem[%c2] : memref<4xf32, #gpu.address_space<workgroup>>
      %p3 = memref.load %smem[%c3] : memref<4xf32, #gpu.address_space<workgroup>>
      %s01 = arith.addf %p0, %p1 : f32
      %s012 = arith.addf %s01, %p2 : f32
      %s = arith.addf %s012, %p3 : f32
      memref.store %s, %y[%r, %o] : memref<?x@@n@@xf32>
    }
    gpu.barrier
  }
  return
}
)",
                   {{"name", name},
                    {"xt", xt},
                    {"wt", wt},
                    {"n", str(n)},
                    {"k4", str(k / 4)},
                    {"dot", warp::rowsDot({{"%w", wt, "%o", "", "", ""}}, false, "%x", xt, "%xr",
                                          k / 4, {"q_dot"}, "%col")},
                    {"sum", warp::warpSum("q_dot", "part_sum")}});
  return textKernel(name, "kiln.linear", body);
}

KernelSpec expertGateUpWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            bool nvfp4) {
  // A warp computes rows o0, o0 + 1 of gate and of up: four weight rows
  // sharing each load of z.
  std::string name = "expert_gateup_warp_" + str(experts) + "e_top" + str(k) + "_" +
                     str(intermediate) + "x" + str(latent) + formatSuffix(nvfp4);
  std::string zt = "memref<?x" + str(latent) + "xf32>";
  warp::ExpertProjection gate =
      warp::expertProjection("gate", experts, intermediate, latent, nvfp4, {"%o0", "%o1"});
  warp::ExpertProjection up =
      warp::expertProjection("up", experts, intermediate, latent, nvfp4, {"%o0", "%o1"});
  std::vector<warp::WeightRow> rows = gate.rows;
  rows.insert(rows.end(), up.rows.begin(), up.rows.end());
  std::string body = fillTemplate(
      R"(
func.func @@@name@@(%z: @@zt@@, %idx: memref<?x@@K@@xi32>, @@gargs@@, @@uargs@@,
                    %h: memref<?x@@K@@x@@I@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv@@fmt@@", parallel = "tokens*experts_per_token*intermediate", rows_per_warp = 2 : i64}} {
@@ids@@
  %c2 = arith.constant 2 : index
  %groups = arith.constant @@I2@@ : index
  %per_token = arith.constant @@KI2@@ : index
  %one_f = arith.constant 1.0 : f32
@@loop@@@@gglob@@
@@uglob@@
@@dot@@
@@s0@@
@@s1@@
@@s2@@
@@s3@@
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
      // h = silu(gate z) * (up z)
@@swiglu@@    }
  }
  return
}
)",
      {{"name", name},
       {"zt", zt},
       {"K", str(k)},
       {"I", str(intermediate)},
       {"I2", str(intermediate / 2)},
       {"loop", expertItemLoop(2, k)},
       {"KI2", str(k * intermediate / 2)},
       {"fmt", formatSuffix(nvfp4)},
       {"gargs", gate.args},
       {"uargs", up.args},
       {"ids", warp::warpIds()},
       {"gglob", gate.globalLoad},
       {"uglob", up.globalLoad},
       {"dot", warp::rowsDot(rows, nvfp4, "%z", zt, "%t", latent, {"gd0", "gd1", "ud0", "ud1"})},
       {"s0", warp::warpSum("gd0", "g0")},
       {"s1", warp::warpSum("gd1", "g1")},
       {"s2", warp::warpSum("ud0", "u0")},
       {"s3", warp::warpSum("ud1", "u1")},
       {"swiglu",
        warp::swiGluStore("%h", "memref<?x" + str(k) + "x" + str(intermediate) + "xf32>")}});
  return textKernel(name, "kiln.megamoe", body);
}

KernelSpec expertDownWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                          bool nvfp4) {
  // A warp computes rows o0 .. o0 + 3: four weight rows sharing each load of h.
  std::string name = "expert_down_warp_" + str(experts) + "e_top" + str(k) + "_" + str(latent) +
                     "x" + str(intermediate) + formatSuffix(nvfp4);
  std::string ht = "memref<?x" + str(k) + "x" + str(intermediate) + "xf32>";
  warp::ExpertProjection down = warp::expertProjection("down", experts, latent, intermediate, nvfp4,
                                                       {"%o0", "%o1", "%o2", "%o3"});
  std::string stores;
  for (int r = 0; r < 4; ++r)
    stores += "      memref.store %y" + std::to_string(r) + ", %y[%t, %j, %o" + std::to_string(r) +
              "] : memref<?x" + str(k) + "x" + str(latent) + "xf32>\n";
  std::string body =
      fillTemplate(R"(
func.func @@@name@@(%h: @@ht@@, %idx: memref<?x@@K@@xi32>, @@dargs@@,
                    %y: memref<?x@@K@@x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "warp-gemv@@fmt@@", parallel = "tokens*experts_per_token*latent", rows_per_warp = 4 : i64}} {
@@ids@@
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %groups = arith.constant @@L4@@ : index
  %per_token = arith.constant @@KL4@@ : index
@@loop@@@@glob@@
@@dot@@
@@s0@@
@@s1@@
@@s2@@
@@s3@@
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
@@stores@@    }
  }
  return
}
)",
                   {{"name", name},
                    {"ht", ht},
                    {"K", str(k)},
                    {"L", str(latent)},
                    {"L4", str(latent / 4)},
                    {"loop", expertItemLoop(4, k)},
                    {"KL4", str(k * latent / 4)},
                    {"fmt", formatSuffix(nvfp4)},
                    {"dargs", down.args},
                    {"ids", warp::warpIds()},
                    {"glob", down.globalLoad},
                    {"dot", warp::rowsDot(down.rows, nvfp4, "%h", ht, "%t, %j", intermediate,
                                          {"yd0", "yd1", "yd2", "yd3"})},
                    {"s0", warp::warpSum("yd0", "y0")},
                    {"s1", warp::warpSum("yd1", "y1")},
                    {"s2", warp::warpSum("yd2", "y2")},
                    {"s3", warp::warpSum("yd3", "y3")},
                    {"stores", stores}});
  return textKernel(name, "kiln.megamoe", body);
}

} // namespace kiln::kernels
