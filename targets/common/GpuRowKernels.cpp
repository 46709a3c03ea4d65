// GPU kernels for the row-wise ops of a token: a block of up to 1024 threads
// per token row for the RMSNorms of the hidden state (each thread a strided
// quarter-vector of the row, the warps' sums of squares combined in shared
// memory in a fixed order), a warp per (token, head) for head norms and
// rotary embedding, a thread per 4 elements for the embedding gather and the
// experts' weighted sum. The CPU forms of these ops loop over a row in one
// part; on a GPU that leaves all but one thread idle and costs more than the
// GEMVs around them.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/WarpSnippets.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

namespace kiln::kernels {

using namespace mlir;

namespace {

// Block-wide sum of f32 `%in` over the block's `warps` warps: warp sums,
// then the warps' results through shared memory slots [slot, slot + warps)
// of %smem, added in a fixed order so every thread gets the same,
// deterministic total %out.
std::string blockSum(const std::string &in, const std::string &out, int64_t slot, int64_t warps,
                     const std::string &smemType) {
  std::string text = warp::warpSum(in, out + "_w") +
                     fillTemplate(R"(
    %@@o@@_lead = arith.cmpi eq, %lane, %c0 : index
    %@@o@@_slot = arith.constant @@slot@@ : index
    %@@o@@_at = arith.addi %wid, %@@o@@_slot : index
    scf.if %@@o@@_lead {
      memref.store %@@o@@_w, %smem[%@@o@@_at] : @@st@@
    }
    gpu.barrier
)",
                                  {{"o", out}, {"slot", str(slot)}, {"st", smemType}});
  std::string sum;
  for (int64_t w = 0; w < warps; ++w) {
    std::string v = "%" + out + "_p" + str(w);
    text += "    %" + out + "_i" + str(w) + " = arith.constant " + str(slot + w) + " : index\n" +
            "    " + v + " = memref.load %smem[%" + out + "_i" + str(w) + "] : " + smemType + "\n";
    if (w == 0) {
      sum = v;
      continue;
    }
    std::string next = w + 1 == warps ? "%" + out : "%" + out + "_s" + str(w);
    text += "    " + next + " = arith.addf " + sum + ", " + v + " : f32\n";
    sum = next;
  }
  if (warps == 1)
    text += "    %" + out + "_zero = arith.constant 0.0 : f32\n    %" + out + " = arith.addf " +
            sum + ", %" + out + "_zero : f32\n";
  return text;
}

// Shared memory of a block kernel: two slots a warp (two block sums in a row
// need not wait for each other's readers).
std::string smemType(int64_t threads) {
  return "memref<" + str(2 * (threads / 32)) + "xf32, #gpu.address_space<workgroup>>";
}

// The shared header of a block-per-row kernel: %row is the block.
std::string blockIds(const std::string &smemName, int64_t threads) {
  return fillTemplate(R"(
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c32 = arith.constant 32 : index
  %stride = arith.constant @@stride@@ : index
  %tid = gpu.thread_id x
  %row = gpu.block_id x
  %lane = arith.remui %tid, %c32 : index
  %wid = arith.divui %tid, %c32 : index
  %t4 = arith.muli %tid, %c4 : index
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %one_f = arith.constant 1.0 : f32
  %smem = memref.get_global @@@s@@ : @@st@@
)",
                      {{"s", smemName}, {"stride", str(4 * threads)}, {"st", smemType(threads)}});
}

std::string sharedSlots(const std::string &smemName, int64_t threads) {
  return "memref.global \"private\" @" + smemName + " : " + smemType(threads) + "\n";
}

// Sum of squares of row %row of `src` (lanes 4 apart, threads 512 apart).
std::string sumSquares(const std::string &src, const std::string &type, const std::string &out) {
  return fillTemplate(R"(
    %@@o@@_v = scf.for %c = %t4 to %width step %stride iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %v = vector.load @@src@@[%row, %c] {alignment = 16} : @@t@@, vector<4xf32>
      %n = vector.fma %v, %v, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %@@o@@ = vector.reduction <add>, %@@o@@_v : vector<4xf32> into f32
)",
                      {{"o", out}, {"src", src}, {"t", type}});
}

// dst[%row] = src[%row] * inv * weight, this thread's quarter-vectors.
std::string scaleRow(const std::string &src, const std::string &dst, const std::string &type,
                     const std::string &weight, const std::string &weightType,
                     const std::string &inv) {
  return fillTemplate(
      R"(
    scf.for %c = %t4 to %width step %stride {
      %v = vector.load @@src@@[%row, %c] {alignment = 16} : @@t@@, vector<4xf32>
      %wb = vector.load @@w@@[%c] : @@wt@@, vector<4xbf16>
      %wf = arith.extf %wb : vector<4xbf16> to vector<4xf32>
      %s = arith.mulf %v, @@inv@@ : vector<4xf32>
      %o = arith.mulf %s, %wf : vector<4xf32>
      vector.store %o, @@dst@@[%row, %c] {alignment = 16} : @@t@@, vector<4xf32>
    }
)",
      {{"src", src}, {"dst", dst}, {"t", type}, {"w", weight}, {"wt", weightType}, {"inv", inv}});
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

// The inverse RMS of row %row of `src` over the block: %<out> (f32) and
// %<out>_v (its vector<4xf32> broadcast), through shared slots from `slot`.
std::string blockInverseRms(const std::string &src, const std::string &type, const std::string &out,
                            int64_t slot, double eps, int64_t threads) {
  return sumSquares(src, type, out + "_ss") +
         blockSum(out + "_ss", out + "_total", slot, threads / 32, smemType(threads)) +
         inverseRms(out + "_total", floatLiteral(eps), out);
}

} // namespace

bool gpuRowsFit(int64_t width) { return width % 4 == 0; }

int64_t rowBlockThreads(int64_t width) {
  return std::clamp<int64_t>(width / 4 / 32 * 32, 32, 1024);
}

KernelSpec rmsNormBlock(int64_t width, double eps) {
  int64_t threads = rowBlockThreads(width);
  std::string name = "rms_norm_block_" + str(width) + epsSuffix(eps);
  std::string row = "memref<?x" + str(width) + "xf32>", wt = "memref<" + str(width) + "xbf16>";
  std::string body = sharedSlots(name + "_smem", threads) +
                     fillTemplate(R"(
func.func @@@name@@(%x: @@row@@, %w: @@wt@@, %y: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-row", threads = @@threads@@ : i64}} {
@@ids@@
  %width = arith.constant @@W@@ : index
  %widthf = arith.constant @@Wf@@ : f32
@@inv@@
@@out@@
  return
}
)",
                                  {{"name", name},
                                   {"row", row},
                                   {"threads", str(threads)},
                                   {"wt", wt},
                                   {"ids", blockIds(name + "_smem", threads)},
                                   {"W", str(width)},
                                   {"Wf", floatLiteral(double(width))},
                                   {"inv", blockInverseRms("%x", row, "inv", 0, eps, threads)},
                                   {"out", scaleRow("%x", "%y", row, "%w", wt, "%inv_v")}});
  return textKernel(name, "kiln.rms_norm", body);
}

KernelSpec normResidualBlock(int64_t width, double postEps, double nextEps) {
  int64_t threads = rowBlockThreads(width);
  std::string name = "norm_residual_block_" + str(width) + epsSuffix(postEps) + epsSuffix(nextEps);
  std::string row = "memref<?x" + str(width) + "xf32>", wt = "memref<" + str(width) + "xbf16>";
  // new_res = res + gate * RMSNorm(upd; post); normed = RMSNorm(new_res; next).
  std::string body =
      sharedSlots(name + "_smem", threads) +
      fillTemplate(R"(
func.func @@@name@@(%res: @@row@@, %upd: @@row@@, %post: @@wt@@, %gate: @@wt@@, %next: @@wt@@,
                    %new_res: @@row@@, %normed: @@row@@, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-row", threads = @@threads@@ : i64}} {
@@ids@@
  %width = arith.constant @@W@@ : index
  %widthf = arith.constant @@Wf@@ : f32
@@inv1@@
    %hs_v = scf.for %c = %t4 to %width step %stride iter_args(%a = %zero_v) -> (vector<4xf32>) {
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
@@out@@
  return
}
)",
                   {{"name", name},
                    {"row", row},
                    {"threads", str(threads)},
                    {"wt", wt},
                    {"ids", blockIds(name + "_smem", threads)},
                    {"W", str(width)},
                    {"Wf", floatLiteral(double(width))},
                    {"inv1", blockInverseRms("%upd", row, "inv1", 0, postEps, threads)},
                    {"sum2", blockSum("hs", "t2", threads / 32, threads / 32, smemType(threads))},
                    {"inv2", inverseRms("t2", floatLiteral(nextEps), "inv2")},
                    {"out", scaleRow("%new_res", "%normed", row, "%next", wt, "%inv2_v")}});
  return textKernel(name, "kiln.norm_residual", body);
}

// The thread kernels (typed IR): a thread per four elements of a row, launch
// part p taking row p / (width / 4), elements 4 (p % (width / 4)) ...
namespace {
Tiling fourElements() {
  Tiling tiling;
  tiling.set("kind", "threads").set("elements", 4);
  return tiling;
}
} // namespace

KernelSpec embedThreads(int64_t vocab, int64_t hidden) {
  std::string name = "embed_threads_" + str(vocab) + "x" + str(hidden);
  auto args = [&](Builder &b) -> std::vector<Type> {
    return {MemRefType::get({vocab, hidden}, b.getBF16Type()),
            MemRefType::get({ShapedType::kDynamic}, b.getI32Type()),
            MemRefType::get({ShapedType::kDynamic, hidden}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.embed", fourElements(), args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Value c4 = k.index(4), quarters = k.index(hidden / 4);
    Value p = k.argIndex(4);
    Value tCount = k.argIndex(3);
    Value t = arith::DivUIOp::create(b, p, quarters);
    Value q = arith::RemUIOp::create(b, p, quarters);
    Value c = arith::MulIOp::create(b, q, c4);
    Value in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, t, tCount);
    auto ifIn = scf::IfOp::create(b, in, /*withElse=*/false);
    b.setInsertionPointToStart(&ifIn.getThenRegion().front());
    Value id32 = memref::LoadOp::create(b, k.arg(1), ValueRange{t});
    Value id = arith::IndexCastOp::create(b, b.getIndexType(), id32);
    Value bf = vector::LoadOp::create(b, VectorType::get({4}, b.getBF16Type()), k.arg(0),
                                      ValueRange{id, c}, false, llvm::MaybeAlign(8));
    Value v = arith::ExtFOp::create(b, VectorType::get({4}, b.getF32Type()), bf);
    vector::StoreOp::create(b, v, k.arg(2), ValueRange{t, c}, false, llvm::MaybeAlign(16));
  });
}

KernelSpec expertScalesBlock(int64_t k, int64_t latent, double eps) {
  int64_t threads = rowBlockThreads(latent);
  std::string name = "expert_scales_block_top" + str(k) + "_" + str(latent) + epsSuffix(eps);
  std::string yt = "memref<?x" + str(k) + "x" + str(latent) + "xf32>";
  // scale[t, j] = weight[t, j] / sqrt(mean(y[t, j]^2) + eps): a block per (t, j).
  std::string body =
      sharedSlots(name + "_smem", threads) +
      fillTemplate(R"(
func.func @@@name@@(%y: @@yt@@, %w: memref<?x@@K@@xf32>, %scales: memref<?x@@K@@xf32>, %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "block-row", threads = @@threads@@ : i64}} {
@@ids@@
  %kk = arith.constant @@K@@ : index
  %width = arith.constant @@L@@ : index
  %widthf = arith.constant @@Lf@@ : f32
  %t = arith.divui %row, %kk : index
  %j = arith.remui %row, %kk : index
    %sqv = scf.for %c = %t4 to %width step %stride iter_args(%s = %zero_v) -> (vector<4xf32>) {
      %yv = vector.load %y[%t, %j, %c] {alignment = 16} : @@yt@@, vector<4xf32>
      %n = vector.fma %yv, %yv, %s : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    %sq = vector.reduction <add>, %sqv : vector<4xf32> into f32
@@sum@@
@@inv@@
    %first = arith.cmpi eq, %tid, %c0 : index
    scf.if %first {
      %wj = memref.load %w[%t, %j] : memref<?x@@K@@xf32>
      %scale = arith.mulf %wj, %inv : f32
      memref.store %scale, %scales[%t, %j] : memref<?x@@K@@xf32>
    }
  return
}
)",
                   {{"name", name},
                    {"yt", yt},
                    {"K", str(k)},
                    {"L", str(latent)},
                    {"Lf", floatLiteral(double(latent))},
                    {"threads", str(threads)},
                    {"ids", blockIds(name + "_smem", threads)},
                    {"sum", blockSum("sq", "ss", 0, threads / 32, smemType(threads))},
                    {"inv", inverseRms("ss", floatLiteral(eps), "inv")}});
  return textKernel(name, "kiln.megamoe", body);
}

bool routerWarpFits(int64_t experts) { return experts % 32 == 0 && experts <= 1024; }

KernelSpec routerTopKWarp(int64_t experts, int64_t k) {
  // A warp per token: lane l holds logits l, l + 32, ...; softmax numerators
  // against the warp's max; k rounds of a warp argmax (ties to the lower
  // index, as the CPU kernel), the winner's lane retiring it; the weights
  // renormalised over the k chosen.
  int64_t per = experts / 32;
  std::string name = "router_warp_top" + str(k) + "_of_" + str(experts);
  std::string lt = "memref<?x" + str(experts) + "xf32>";
  std::string loads, pinit, maxChain = "%neg_inf";
  for (int64_t i = 0; i < per; ++i) {
    std::string I = str(i);
    loads += "    %ci" + I + " = arith.constant " + str(32 * i) +
             " : index\n"
             "    %e" +
             I + " = arith.addi %lane, %ci" + I +
             " : index\n"
             "    %l" +
             I + " = memref.load %logits[%t, %e" + I + "] : " + lt +
             "\n"
             "    %m" +
             I + " = arith.maximumf " + maxChain + ", %l" + I + " : f32\n";
    maxChain = "%m" + I;
  }
  std::string maxReduce;
  std::string value = maxChain;
  for (int offset = 1; offset < 32; offset *= 2) {
    std::string o = str(offset);
    maxReduce += "    %mo" + o + " = arith.constant " + o +
                 " : i32\n"
                 "    %mx" +
                 o + ", %mok" + o + " = gpu.shuffle xor " + value + ", %mo" + o +
                 ", %w32 : f32\n"
                 "    %mr" +
                 o + " = arith.maximumf " + value + ", %mx" + o + " : f32\n";
    value = "%mr" + o;
  }
  std::string iterArgs, iterTypes, yieldsInit;
  for (int64_t i = 0; i < per; ++i) {
    std::string I = str(i);
    pinit += "    %d" + I + " = arith.subf %l" + I + ", " + value +
             " : f32\n"
             "    %p" +
             I + " = math.exp %d" + I + " : f32\n";
    iterArgs += ", %q" + I + " = %p" + I;
    iterTypes += ", f32";
  }
  // One round: this lane's best (value, expert), then the warp's.
  std::string round =
      "      %bv0 = arith.addf %taken, %zero_f : f32\n      %bi0 = arith.addi %c0, %c0 : index\n";
  for (int64_t i = 0; i < per; ++i) {
    std::string I = str(i), N = str(i + 1);
    round += "      %better" + I + " = arith.cmpf ogt, %q" + I + ", %bv" + I +
             " : f32\n"
             "      %bv" +
             N + " = arith.select %better" + I + ", %q" + I + ", %bv" + I +
             " : f32\n"
             "      %bi" +
             N + " = arith.select %better" + I + ", %e" + I + ", %bi" + I + " : index\n";
  }
  std::string bv = "%bv" + str(per), bi = "%bi" + str(per);
  round += "      %bi32 = arith.index_cast " + bi + " : index to i32\n";
  std::string v = bv, ix = "%bi32";
  for (int offset = 1; offset < 32; offset *= 2) {
    std::string o = str(offset);
    round += "      %ov" + o + ", %ovk" + o + " = gpu.shuffle xor " + v + ", %mo" + o +
             ", %w32 : f32\n"
             "      %oi" +
             o + ", %oik" + o + " = gpu.shuffle xor " + ix + ", %mo" + o +
             ", %w32 : i32\n"
             "      %gt" +
             o + " = arith.cmpf ogt, %ov" + o + ", " + v +
             " : f32\n"
             "      %eq" +
             o + " = arith.cmpf oeq, %ov" + o + ", " + v +
             " : f32\n"
             "      %lt" +
             o + " = arith.cmpi slt, %oi" + o + ", " + ix +
             " : i32\n"
             "      %tie" +
             o + " = arith.andi %eq" + o + ", %lt" + o +
             " : i1\n"
             "      %take" +
             o + " = arith.ori %gt" + o + ", %tie" + o +
             " : i1\n"
             "      %wv" +
             o + " = arith.select %take" + o + ", %ov" + o + ", " + v +
             " : f32\n"
             "      %wi" +
             o + " = arith.select %take" + o + ", %oi" + o + ", " + ix + " : i32\n";
    v = "%wv" + o;
    ix = "%wi" + o;
  }
  round += "      %win = arith.index_cast " + ix + " : i32 to index\n";
  std::string retire, yields = "%nsum";
  for (int64_t i = 0; i < per; ++i) {
    std::string I = str(i);
    retire += "      %hit" + I + " = arith.cmpi eq, %e" + I +
              ", %win : index\n"
              "      %r" +
              I + " = arith.select %hit" + I + ", %taken, %q" + I + " : f32\n";
    yields += ", %r" + I;
  }
  std::string body = fillTemplate(R"(
func.func @@@name@@(%logits: @@lt@@, %weights: memref<?x@@K@@xf32>, %indices: memref<?x@@K@@xi32>,
                    %rows_i: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "warp-rows", parallel = "tokens"}} {
@@ids@@
  %k = arith.constant @@K@@ : index
  %w32 = arith.constant 32 : i32
  %neg_inf = arith.constant 0xFF800000 : f32
  %zero_f = arith.constant 0.0 : f32
  %taken = arith.constant -1.0 : f32
  %rows = arith.index_cast %rows_i : i64 to index
  %lead = arith.cmpi eq, %lane, %c0 : index
  scf.for %t = %warp to %rows step %warps {
@@loads@@
@@maxr@@
@@pinit@@
    %res:@@R@@ = scf.for %j = %c0 to %k step %c1 iter_args(%sum = %zero_f@@iargs@@) -> (f32@@itypes@@) {
@@round@@
      scf.if %lead {
        memref.store @@v@@, %weights[%t, %j] : memref<?x@@K@@xf32>
        memref.store @@ix@@, %indices[%t, %j] : memref<?x@@K@@xi32>
      }
      %nsum = arith.addf %sum, @@v@@ : f32
@@retire@@
      scf.yield @@yields@@ : f32@@itypes@@
    }
    scf.if %lead {
      scf.for %j = %c0 to %k step %c1 {
        %wj = memref.load %weights[%t, %j] : memref<?x@@K@@xf32>
        %n = arith.divf %wj, %res#0 : f32
        memref.store %n, %weights[%t, %j] : memref<?x@@K@@xf32>
      }
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"lt", lt},
                                   {"K", str(k)},
                                   {"R", str(per + 1)},
                                   {"ids", warp::warpIds()},
                                   {"loads", loads},
                                   {"maxr", maxReduce},
                                   {"pinit", pinit},
                                   {"iargs", iterArgs},
                                   {"itypes", iterTypes},
                                   {"round", round},
                                   {"v", v},
                                   {"ix", ix},
                                   {"retire", retire},
                                   {"yields", yields}});
  return textKernel(name, "kiln.router_topk", body);
}

KernelSpec expertCombineThreads(int64_t experts, int64_t k, int64_t latent) {
  std::string name =
      "expert_combine_threads_" + str(experts) + "e_top" + str(k) + "_" + str(latent);
  // y, idx, scales, post_norm, out; rows.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k, latent}, b.getF32Type()),
            MemRefType::get({dynamic, k}, b.getI32Type()),
            MemRefType::get({dynamic, k}, b.getF32Type()),
            MemRefType::get({experts, latent}, b.getBF16Type()),
            MemRefType::get({dynamic, latent}, b.getF32Type()),
            b.getI64Type()};
  };
  // out[t, c..c+3] = sum_j scale[t, j] * post_norm[e_j, c..] * y[t, j, c..], j in order.
  return buildKernel(name, "kiln.megamoe", fourElements(), args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    auto v4 = VectorType::get({4}, b.getF32Type());
    Value y = s.arg(0), idx = s.arg(1), scales = s.arg(2), pn = s.arg(3), out = s.arg(4);
    Value c0 = s.index(0), c1 = s.index(1), c4 = s.index(4), kk = s.index(k);
    Value zero32 = s.i32(0), quarters = s.index(latent / 4);
    Value zeroV = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    Value p = s.argIndex(6);
    Value rows = s.argIndex(5);
    Value t = arith::DivUIOp::create(b, p, quarters);
    Value qq = arith::RemUIOp::create(b, p, quarters);
    Value c = arith::MulIOp::create(b, qq, c4);
    Value in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, t, rows);
    auto ifIn = scf::IfOp::create(b, in, /*withElse=*/false);
    b.setInsertionPointToStart(&ifIn.getThenRegion().front());
    auto acc = scf::ForOp::create(b, c0, kk, c1, ValueRange{zeroV});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(acc.getBody());
      Value j = acc.getInductionVar(), a = acc.getRegionIterArgs()[0];
      // -1: another rank's expert (expert parallelism), whose row of y no
      // kernel wrote: skipped.
      Value e32 = memref::LoadOp::create(b, idx, ValueRange{t, j});
      Value here = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e32, zero32);
      auto ifHere = scf::IfOp::create(b, TypeRange{v4}, here, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&ifHere.getThenRegion().front());
        Value e = arith::IndexCastOp::create(b, b.getIndexType(), e32);
        Value yv =
            vector::LoadOp::create(b, v4, y, ValueRange{t, j, c}, false, llvm::MaybeAlign(16));
        Value pb = vector::LoadOp::create(b, VectorType::get({4}, b.getBF16Type()), pn,
                                          ValueRange{e, c}, false, llvm::MaybeAlign(8));
        Value pf = arith::ExtFOp::create(b, v4, pb);
        Value sj = memref::LoadOp::create(b, scales, ValueRange{t, j});
        Value sv = vector::BroadcastOp::create(b, v4, sj);
        Value yn = arith::MulFOp::create(b, yv, pf);
        Value f = vector::FMAOp::create(b, yn, sv, a);
        scf::YieldOp::create(b, ValueRange{f});
        b.setInsertionPointToStart(&ifHere.getElseRegion().front());
        scf::YieldOp::create(b, ValueRange{a});
      }
      scf::YieldOp::create(b, ifHere.getResults());
    }
    vector::StoreOp::create(b, acc.getResult(0), out, ValueRange{t, c}, false,
                            llvm::MaybeAlign(16));
  });
}

} // namespace kiln::kernels
