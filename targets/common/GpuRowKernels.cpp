// GPU kernels for the row-wise ops of a token: a block of 128 threads per
// token row for the RMSNorms of the hidden state (each thread a strided
// quarter-vector of the row, the warps' sums of squares combined in shared
// memory in a fixed order), a warp per (token, head) for head norms and
// rotary embedding, a thread per 4 elements for the embedding gather and the
// experts' weighted sum. The CPU forms of these ops loop over a row in one
// part; on a GPU that leaves all but one thread idle and costs more than the
// GEMVs around them.
#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::kernels {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string epsName(double eps) {
  return "_eps" + str(static_cast<int64_t>(eps * 1e9 + 0.5));
}

// Block-wide sum of f32 `%in` over the 128 threads: warp sums, then the four
// warps' results through shared memory slots [slot, slot + 4) of %smem, read
// in a fixed order so every thread gets the same, deterministic total %out.
std::string blockSum(const std::string &in, const std::string &out, int slot) {
  std::string s0 = str(slot), s1 = str(slot + 1), s2 = str(slot + 2), s3 = str(slot + 3);
  return warp::warpSum(in, out + "_w") + fillTemplate(R"(
    %@@o@@_lead = arith.cmpi eq, %lane, %c0 : index
    %@@o@@_at = arith.addi %wid, %@@o@@_slot : index
    scf.if %@@o@@_lead {
      memref.store %@@o@@_w, %smem[%@@o@@_at] : memref<8xf32, #gpu.address_space<workgroup>>
    }
    gpu.barrier
    %@@o@@_0 = memref.load %smem[%@@o@@_i0] : memref<8xf32, #gpu.address_space<workgroup>>
    %@@o@@_1 = memref.load %smem[%@@o@@_i1] : memref<8xf32, #gpu.address_space<workgroup>>
    %@@o@@_2 = memref.load %smem[%@@o@@_i2] : memref<8xf32, #gpu.address_space<workgroup>>
    %@@o@@_3 = memref.load %smem[%@@o@@_i3] : memref<8xf32, #gpu.address_space<workgroup>>
    %@@o@@_01 = arith.addf %@@o@@_0, %@@o@@_1 : f32
    %@@o@@_23 = arith.addf %@@o@@_2, %@@o@@_3 : f32
    %@@o@@ = arith.addf %@@o@@_01, %@@o@@_23 : f32
)",
                                                     {{"o", out}}) ;
}

std::string blockSumConstants(const std::string &out, int slot) {
  std::string text = "  %" + out + "_slot = arith.constant " + str(slot) + " : index\n";
  for (int i = 0; i < 4; ++i)
    text += "  %" + out + "_i" + str(i) + " = arith.constant " + str(slot + i) + " : index\n";
  return text;
}

// The shared header of a block-per-row kernel.
std::string blockIds(const std::string &smemName) {
  return fillTemplate(R"(
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %c512 = arith.constant 512 : index
  %tid = gpu.thread_id x
  %row = gpu.block_id x
  %lane = arith.remui %tid, %c32 : index
  %wid = arith.divui %tid, %c32 : index
  %t4 = arith.muli %tid, %c4 : index
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %one_f = arith.constant 1.0 : f32
  %smem = memref.get_global @@@s@@ : memref<8xf32, #gpu.address_space<workgroup>>
)",
                      {{"s", smemName}});
}

std::string sharedSlots(const std::string &smemName) {
  return "memref.global \"private\" @" + smemName +
         " : memref<8xf32, #gpu.address_space<workgroup>>\n";
}

// Sum of squares of row %row of `src` (lanes 4 apart, threads 512 apart).
std::string sumSquares(const std::string &src, const std::string &type, const std::string &out) {
  return fillTemplate(R"(
    %@@o@@_v = scf.for %c = %t4 to %width step %c512 iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %v = vector.load @@src@@[%row, %c] {alignment = 16} : @@t@@, vector<4xf32>
      %n = vector.fma %v, %v, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %@@o@@ = vector.reduction <add>, %@@o@@_v : vector<4xf32> into f32
)",
                      {{"o", out}, {"src", src}, {"t", type}});
}

// 1 / sqrt(sum / width + eps), as the CPU kernels compute it.
std::string inverseRms(const std::string &sum, const std::string &eps, const std::string &out) {
  return fillTemplate(R"(
    %@@o@@_mean = arith.divf %@@s@@, %widthf : f32
    %@@o@@_eps = arith.constant @@eps@@ : f32
    %@@o@@_me = arith.addf %@@o@@_mean, %@@o@@_eps : f32
    %@@o@@_rms = math.sqrt %@@o@@_me : f32
    %@@o@@ = arith.divf %one_f, %@@o@@_rms : f32
    %@@o@@_v = vector.broadcast %@@o@@ : f32 to vector<4xf32>
)",
                      {{"o", out}, {"s", sum}, {"eps", eps}});
}

} // namespace

bool gpuRowsFit(int64_t width) { return width % 4 == 0; }

KernelSpec rmsNormBlock(int64_t width, double eps) {
  std::string name = "rms_norm_block_" + str(width) + epsName(eps);
  std::string row = "memref<?x" + str(width) + "xf32>", wt = "memref<" + str(width) + "xbf16>";
  std::string body = sharedSlots(name + "_smem") + fillTemplate(R"(
func.func @@@name@@(%x: @@row@@, %w: @@wt@@, %y: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-row", threads = 128 : i64}} {
@@ids@@
  %width = arith.constant @@W@@ : index
  %widthf = arith.constant @@Wf@@ : f32
@@consts@@
@@ss@@
@@sum@@
@@inv@@
    scf.for %c = %t4 to %width step %c512 {
      %v = vector.load %x[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
      %wb = vector.load %w[%c] : @@wt@@, vector<4xbf16>
      %wf = arith.extf %wb : vector<4xbf16> to vector<4xf32>
      %s = arith.mulf %v, %inv_v : vector<4xf32>
      %o = arith.mulf %s, %wf : vector<4xf32>
      vector.store %o, %y[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
    }
  return
}
)",
                                                                 {{"name", name},
                                                                  {"row", row},
                                                                  {"wt", wt},
                                                                  {"ids", blockIds(name + "_smem")},
                                                                  {"W", str(width)},
                                                                  {"Wf", floatLiteral(double(width))},
                                                                  {"consts", blockSumConstants("total", 0)},
                                                                  {"ss", sumSquares("%x", row, "part_ss")},
                                                                  {"sum", blockSum("part_ss", "total", 0)},
                                                                  {"inv", inverseRms("total", floatLiteral(eps), "inv")}});
  return KernelSpec{name, "kiln.rms_norm", "{\"kind\": \"block-row\", \"threads\": 128}", body};
}

KernelSpec normResidualBlock(int64_t width, double postEps, double nextEps) {
  std::string name = "norm_residual_block_" + str(width) + epsName(postEps) + epsName(nextEps);
  std::string row = "memref<?x" + str(width) + "xf32>", wt = "memref<" + str(width) + "xbf16>";
  // new_res = res + gate * RMSNorm(upd; post); normed = RMSNorm(new_res; next).
  std::string body = sharedSlots(name + "_smem") + fillTemplate(R"(
func.func @@@name@@(%res: @@row@@, %upd: @@row@@, %post: @@wt@@, %gate: @@wt@@, %next: @@wt@@,
                    %new_res: @@row@@, %normed: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-row", threads = 128 : i64}} {
@@ids@@
  %width = arith.constant @@W@@ : index
  %widthf = arith.constant @@Wf@@ : f32
@@c1@@
@@c2@@
@@ss1@@
@@sum1@@
@@inv1@@
    %hs_v = scf.for %c = %t4 to %width step %c512 iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %u = vector.load %upd[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
      %pb = vector.load %post[%c] : @@wt@@, vector<4xbf16>
      %pf = arith.extf %pb : vector<4xbf16> to vector<4xf32>
      %un = arith.mulf %u, %inv1_v : vector<4xf32>
      %unw = arith.mulf %un, %pf : vector<4xf32>
      %gb = vector.load %gate[%c] : @@wt@@, vector<4xbf16>
      %gf = arith.extf %gb : vector<4xbf16> to vector<4xf32>
      %r = vector.load %res[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
      %gu = arith.mulf %gf, %unw : vector<4xf32>
      %h = arith.addf %r, %gu : vector<4xf32>
      vector.store %h, %new_res[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
      %n = vector.fma %h, %h, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %hs = vector.reduction <add>, %hs_v : vector<4xf32> into f32
@@sum2@@
@@inv2@@
    scf.for %c = %t4 to %width step %c512 {
      %h = vector.load %new_res[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
      %nb = vector.load %next[%c] : @@wt@@, vector<4xbf16>
      %nf = arith.extf %nb : vector<4xbf16> to vector<4xf32>
      %s = arith.mulf %h, %inv2_v : vector<4xf32>
      %o = arith.mulf %s, %nf : vector<4xf32>
      vector.store %o, %normed[%row, %c] {alignment = 16} : @@row@@, vector<4xf32>
    }
  return
}
)",
                                                                 {{"name", name},
                                                                  {"row", row},
                                                                  {"wt", wt},
                                                                  {"ids", blockIds(name + "_smem")},
                                                                  {"W", str(width)},
                                                                  {"Wf", floatLiteral(double(width))},
                                                                  {"c1", blockSumConstants("t1", 0)},
                                                                  {"c2", blockSumConstants("t2", 4)},
                                                                  {"ss1", sumSquares("%upd", row, "us")},
                                                                  {"sum1", blockSum("us", "t1", 0)},
                                                                  {"inv1", inverseRms("t1", floatLiteral(postEps), "inv1")},
                                                                  {"sum2", blockSum("hs", "t2", 4)},
                                                                  {"inv2", inverseRms("t2", floatLiteral(nextEps), "inv2")}});
  return KernelSpec{name, "kiln.norm_residual", "{\"kind\": \"block-row\", \"threads\": 128}", body};
}

KernelSpec headNormWarp(int64_t heads, int64_t headDim, double eps) {
  std::string name = "head_norm_warp_" + str(heads) + "x" + str(headDim) + epsName(eps);
  std::string t3 = "memref<?x" + str(heads) + "x" + str(headDim) + "xf32>";
  std::string wt = "memref<" + str(headDim) + "xbf16>";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: @@t3@@, %w: @@wt@@, %y: @@t3@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens*heads"}} {
@@ids@@
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %heads = arith.constant @@H@@ : index
  %width = arith.constant @@D@@ : index
  %widthf = arith.constant @@Df@@ : f32
  %one_f = arith.constant 1.0 : f32
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %heads : index
  %l4 = arith.muli %lane, %c4 : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %heads : index
    %h = arith.remui %item, %heads : index
    %ssv = scf.for %c = %l4 to %width step %c128 iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %v = vector.load %x[%t, %h, %c] {alignment = 16} : @@t3@@, vector<4xf32>
      %n = vector.fma %v, %v, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %ss = vector.reduction <add>, %ssv : vector<4xf32> into f32
@@sum@@
@@inv@@
    scf.for %c = %l4 to %width step %c128 {
      %v = vector.load %x[%t, %h, %c] {alignment = 16} : @@t3@@, vector<4xf32>
      %wb = vector.load %w[%c] : @@wt@@, vector<4xbf16>
      %wf = arith.extf %wb : vector<4xbf16> to vector<4xf32>
      %s = arith.mulf %v, %inv_v : vector<4xf32>
      %o = arith.mulf %s, %wf : vector<4xf32>
      vector.store %o, %y[%t, %h, %c] {alignment = 16} : @@t3@@, vector<4xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"t3", t3},
                                   {"wt", wt},
                                   {"ids", warp::warpIds()},
                                   {"H", str(heads)},
                                   {"D", str(headDim)},
                                   {"Df", floatLiteral(double(headDim))},
                                   {"sum", warp::warpSum("ss", "total")},
                                   {"inv", inverseRms("total", floatLiteral(eps), "inv")}});
  return KernelSpec{name, "kiln.head_norm", "{\"kind\": \"warp-rows\", \"parallel\": \"tokens*heads\"}",
                    body};
}

KernelSpec ropeWarp(int64_t heads, int64_t headDim, double theta) {
  std::string name = "rope_warp_" + str(heads) + "x" + str(headDim) + "_theta" +
                     str(static_cast<long long>(theta));
  std::string t3 = "memref<?x" + str(heads) + "x" + str(headDim) + "xf32>";
  // The same f64 angle as the CPU kernel: pos * theta^(-2j/d).
  std::string body = fillTemplate(R"(
func.func @@@name@@(%x: @@t3@@, %pos: memref<?xi32>, %out: @@t3@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens*heads"}} {
@@ids@@
  %half = arith.constant @@half@@ : index
  %heads = arith.constant @@H@@ : index
  %theta = arith.constant @@theta@@ : f64
  %minus_two_over_d = arith.constant @@m2d@@ : f64
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %heads : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %heads : index
    %h = arith.remui %item, %heads : index
    %p32 = memref.load %pos[%t] : memref<?xi32>
    %p = arith.sitofp %p32 : i32 to f64
    scf.for %j = %lane to %half step %c32 {
      %j64 = arith.index_cast %j : index to i64
      %jf = arith.sitofp %j64 : i64 to f64
      %e = arith.mulf %jf, %minus_two_over_d : f64
      %freq = math.powf %theta, %e : f64
      %angle = arith.mulf %p, %freq : f64
      %cd = math.cos %angle : f64
      %sd = math.sin %angle : f64
      %c = arith.truncf %cd : f64 to f32
      %s = arith.truncf %sd : f64 to f32
      %j2 = arith.addi %j, %half : index
      %x0 = memref.load %x[%t, %h, %j] : @@t3@@
      %x1 = memref.load %x[%t, %h, %j2] : @@t3@@
      %a = arith.mulf %x0, %c : f32
      %b = arith.mulf %x1, %s : f32
      %o0 = arith.subf %a, %b : f32
      %d = arith.mulf %x1, %c : f32
      %f = arith.mulf %x0, %s : f32
      %o1 = arith.addf %d, %f : f32
      memref.store %o0, %out[%t, %h, %j] : @@t3@@
      memref.store %o1, %out[%t, %h, %j2] : @@t3@@
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"t3", t3},
                                   {"ids", warp::warpIds()},
                                   {"half", str(headDim / 2)},
                                   {"H", str(heads)},
                                   {"theta", floatLiteral(theta)},
                                   {"m2d", floatLiteral(-2.0 / double(headDim))}});
  return KernelSpec{name, "kiln.rope", "{\"kind\": \"warp-rows\", \"parallel\": \"tokens*heads\"}", body};
}

KernelSpec embedThreads(int64_t vocab, int64_t hidden) {
  std::string name = "embed_threads_" + str(vocab) + "x" + str(hidden);
  std::string body = fillTemplate(R"(
func.func @@@name@@(%table: memref<@@v@@x@@h@@xbf16>, %ids: memref<?xi32>, %out: memref<?x@@h@@xf32>, %tokens: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "threads", elements = 4 : i64}} {
  %c4 = arith.constant 4 : index
  %quarters = arith.constant @@q@@ : index
  %p = arith.index_cast %part : i64 to index
  %t_count = arith.index_cast %tokens : i64 to index
  %t = arith.divui %p, %quarters : index
  %q = arith.remui %p, %quarters : index
  %c = arith.muli %q, %c4 : index
  %in = arith.cmpi ult, %t, %t_count : index
  scf.if %in {
    %id32 = memref.load %ids[%t] : memref<?xi32>
    %id = arith.index_cast %id32 : i32 to index
    %b = vector.load %table[%id, %c] {alignment = 8} : memref<@@v@@x@@h@@xbf16>, vector<4xbf16>
    %v = arith.extf %b : vector<4xbf16> to vector<4xf32>
    vector.store %v, %out[%t, %c] {alignment = 16} : memref<?x@@h@@xf32>, vector<4xf32>
  }
  return
}
)",
                                  {{"name", name},
                                   {"v", str(vocab)},
                                   {"h", str(hidden)},
                                   {"q", str(hidden / 4)}});
  return KernelSpec{name, "kiln.embed", "{\"kind\": \"threads\", \"elements\": 4}", body};
}

KernelSpec expertScalesWarp(int64_t k, int64_t latent, double eps) {
  std::string name = "expert_scales_warp_top" + str(k) + "_" + str(latent) + epsName(eps);
  std::string yt = "memref<?x" + str(k) + "x" + str(latent) + "xf32>";
  // scale[t, j] = weight[t, j] / sqrt(mean(y[t, j]^2) + eps): a warp per (t, j).
  std::string body = fillTemplate(R"(
func.func @@@name@@(%y: @@yt@@, %w: memref<?x@@K@@xf32>, %scales: memref<?x@@K@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens*experts_per_token"}} {
@@ids@@
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %kk = arith.constant @@K@@ : index
  %latent = arith.constant @@L@@ : index
  %latentf = arith.constant @@Lf@@ : f32
  %eps = arith.constant @@eps@@ : f32
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %rows = arith.index_cast %rows_i : i64 to index
  %items = arith.muli %rows, %kk : index
  %l4 = arith.muli %lane, %c4 : index
  scf.for %item = %warp to %items step %warps {
    %t = arith.divui %item, %kk : index
    %j = arith.remui %item, %kk : index
    %sqv = scf.for %c = %l4 to %latent step %c128 iter_args(%s = %zero_v) -> (vector<4xf32>) {
      %yv = vector.load %y[%t, %j, %c] {alignment = 16} : @@yt@@, vector<4xf32>
      %n = vector.fma %yv, %yv, %s : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %sq = vector.reduction <add>, %sqv : vector<4xf32> into f32
@@sum@@
    %lead = arith.cmpi eq, %lane, %c0 : index
    scf.if %lead {
      %mean = arith.divf %ss, %latentf : f32
      %me = arith.addf %mean, %eps : f32
      %rms = math.sqrt %me : f32
      %wj = memref.load %w[%t, %j] : memref<?x@@K@@xf32>
      %scale = arith.divf %wj, %rms : f32
      memref.store %scale, %scales[%t, %j] : memref<?x@@K@@xf32>
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"yt", yt},
                                   {"K", str(k)},
                                   {"L", str(latent)},
                                   {"Lf", floatLiteral(double(latent))},
                                   {"eps", floatLiteral(eps)},
                                   {"ids", warp::warpIds()},
                                   {"sum", warp::warpSum("sq", "ss")}});
  return KernelSpec{name, "kiln.megamoe",
                    "{\"kind\": \"warp-rows\", \"parallel\": \"tokens*experts_per_token\"}", body};
}

KernelSpec expertCombineThreads(int64_t experts, int64_t k, int64_t latent) {
  std::string name = "expert_combine_threads_" + str(experts) + "e_top" + str(k) + "_" + str(latent);
  std::string yt = "memref<?x" + str(k) + "x" + str(latent) + "xf32>";
  // out[t, c..c+3] = sum_j scale[t, j] * post_norm[e_j, c..] * y[t, j, c..], j in order.
  std::string body = fillTemplate(R"(
func.func @@@name@@(%y: @@yt@@, %idx: memref<?x@@K@@xi32>, %scales: memref<?x@@K@@xf32>, %pn: memref<@@E@@x@@L@@xbf16>,
                    %out: memref<?x@@L@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "threads", elements = 4 : i64}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %kk = arith.constant @@K@@ : index
  %quarters = arith.constant @@q@@ : index
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %p = arith.index_cast %part : i64 to index
  %rows = arith.index_cast %rows_i : i64 to index
  %t = arith.divui %p, %quarters : index
  %qq = arith.remui %p, %quarters : index
  %c = arith.muli %qq, %c4 : index
  %in = arith.cmpi ult, %t, %rows : index
  scf.if %in {
    %acc = scf.for %j = %c0 to %kk step %c1 iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %e32 = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
      %e = arith.index_cast %e32 : i32 to index
      %yv = vector.load %y[%t, %j, %c] {alignment = 16} : @@yt@@, vector<4xf32>
      %pb = vector.load %pn[%e, %c] {alignment = 8} : memref<@@E@@x@@L@@xbf16>, vector<4xbf16>
      %pf = arith.extf %pb : vector<4xbf16> to vector<4xf32>
      %sj = memref.load %scales[%t, %j] : memref<?x@@K@@xf32>
      %sv = vector.broadcast %sj : f32 to vector<4xf32>
      %yn = arith.mulf %yv, %pf : vector<4xf32>
      %n = vector.fma %yn, %sv, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    vector.store %acc, %out[%t, %c] {alignment = 16} : memref<?x@@L@@xf32>, vector<4xf32>
  }
  return
}
)",
                                  {{"name", name},
                                   {"yt", yt},
                                   {"E", str(experts)},
                                   {"K", str(k)},
                                   {"L", str(latent)},
                                   {"q", str(latent / 4)}});
  return KernelSpec{name, "kiln.megamoe", "{\"kind\": \"threads\", \"elements\": 4}", body};
}

} // namespace kiln::kernels
