#include "targets/nvptx/PeerMegaMoE.h"

#include "targets/common/Generators.h"
#include "targets/common/WarpSnippets.h"

#include <algorithm>

namespace kiln::nvptx {
namespace {

using kernels::fillTemplate;
using kernels::str;
namespace warp = kernels::warp;

constexpr int64_t kThreads = 128; // four warps a block
constexpr int64_t kWarps = kThreads / 32;

int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

// PTX through llvm.inline_asm: the memory-model operations MLIR's memref
// ops do not spell (scoped atomics, acquire loads, release stores, fences)
// and the volatile accesses of peer-written slots. Addresses are i64.
std::string asmLoad64(const std::string &out, const std::string &address,
                      const std::string &semantics) {
  return "    " + out + " = llvm.inline_asm has_side_effects \"ld." + semantics +
         ".global.u64 $0, [$1];\", \"=l,l,~{memory}\" " + address + " : (i64) -> i64\n";
}

std::string asmStore64(const std::string &address, const std::string &value,
                       const std::string &semantics) {
  return "    llvm.inline_asm has_side_effects \"st." + semantics +
         ".global.u64 [$0], $1;\", \"l,l,~{memory}\" " + address + ", " + value +
         " : (i64, i64) -> ()\n";
}

std::string asmAdd64(const std::string &out, const std::string &address,
                     const std::string &semantics) {
  return "    " + out + " = llvm.inline_asm has_side_effects \"atom." + semantics +
         ".global.add.u64 $0, [$1], $2;\", \"=l,l,l,~{memory}\" " + address +
         ", %c1_i64 : (i64, i64) -> i64\n";
}

std::string asmFence(const std::string &scope) {
  return "    llvm.inline_asm has_side_effects \"fence.acq_rel." + scope +
         ";\", \"~{memory}\" : () -> ()\n";
}

std::string asmWarpSync() {
  return "    llvm.inline_asm has_side_effects \"bar.warp.sync 0xffffffff;\", \"~{memory}\" : () "
         "-> "
         "()\n";
}

// %<out> (vector<4xf32>) from the 16 bytes at i64 `address`, bypassing L1.
std::string loadVolatile4(const std::string &out, const std::string &address) {
  return fillTemplate(R"(
    @@o@@_s = llvm.inline_asm has_side_effects "ld.volatile.global.v4.f32 {$0, $1, $2, $3}, [$4];", "=f,=f,=f,=f,l,~{memory}" @@a@@ : (i64) -> !llvm.struct<(f32, f32, f32, f32)>
    @@o@@_0 = llvm.extractvalue @@o@@_s[0] : !llvm.struct<(f32, f32, f32, f32)>
    @@o@@_1 = llvm.extractvalue @@o@@_s[1] : !llvm.struct<(f32, f32, f32, f32)>
    @@o@@_2 = llvm.extractvalue @@o@@_s[2] : !llvm.struct<(f32, f32, f32, f32)>
    @@o@@_3 = llvm.extractvalue @@o@@_s[3] : !llvm.struct<(f32, f32, f32, f32)>
    @@o@@ = vector.from_elements @@o@@_0, @@o@@_1, @@o@@_2, @@o@@_3 : vector<4xf32>
)",
                      {{"o", out}, {"a", address}});
}

// %<out> (f32) from the 4 bytes at i64 `address`, bypassing L1.
std::string loadVolatile1(const std::string &out, const std::string &address) {
  return "    " + out +
         " = llvm.inline_asm has_side_effects \"ld.volatile.global.f32 $0, [$1];\", " +
         "\"=f,l,~{memory}\" " + address + " : (i64) -> f32\n";
}

// Waits until the u64 at `address` reaches `target` (acquire at `scope`).
std::string spinUntil(const std::string &name, const std::string &address,
                      const std::string &target, const std::string &scope) {
  return fillTemplate(R"(
    @@n@@_done = scf.while (@@n@@_arg = %c0_i64) : (i64) -> i64 {
@@load@@      @@n@@_more = arith.cmpi ult, @@n@@_v, @@target@@ : i64
      scf.condition(@@n@@_more) @@n@@_v : i64
    } do {
    ^bb0(@@n@@_x: i64):
      scf.yield @@n@@_x : i64
    }
)",
                      {{"n", name},
                       {"load", asmLoad64(name + "_v", address, "acquire." + scope)},
                       {"target", target}});
}

// The head of a warp loop over (token, choice, group of `rowsPerWarp` rows)
// items of this rank's pairs: defines %t, %j, %o0.., %e (the local expert)
// inside `scf.if %mine`, which the caller closes twice (if, for).
std::string pairItemLoop(const std::string &items, const std::string &perToken,
                         const std::string &groups, int64_t rowsPerWarp, int64_t k) {
  std::string text = fillTemplate(
      R"(
  scf.for %item = %warp to @@items@@ step %warps {
    %t = arith.divui %item, @@per@@ : index
    %rest = arith.remui %item, @@per@@ : index
    %j = arith.divui %rest, @@groups@@ : index
    %group = arith.remui %rest, @@groups@@ : index
    %o0 = arith.muli %group, %c@@R@@ : index
)",
      {{"items", items}, {"per", perToken}, {"groups", groups}, {"R", str(rowsPerWarp)}});
  for (int64_t r = 1; r < rowsPerWarp; ++r)
    text += "    %o" + str(r) + " = arith.addi %o0, %c" + str(r) + " : index\n";
  return text + fillTemplate(R"(
    %eg = memref.load %idx[%t, %j] : memref<?x@@K@@xi32>
    %el = arith.subi %eg, %first_e : i32
    %low = arith.cmpi sge, %el, %c0_i32 : i32
    %high = arith.cmpi slt, %el, %experts_i32 : i32
    %mine = arith.andi %low, %high : i1
    scf.if %mine {
    %e = arith.index_cast %el : i32 to index
)",
                             {{"K", str(k)}});
}

} // namespace

PeerSiteLayout peerSiteLayout(const kernels::PeerMegaMoEShape &s) {
  PeerSiteLayout layout;
  int64_t pairs = s.maxRows * s.k;
  layout.flags = align256(layout.pairs + pairs * 8);
  layout.coefs = align256(layout.flags + 2 * pairs * 8);
  layout.data = align256(layout.coefs + 2 * pairs * 4);
  layout.bytes = align256(layout.data + 2 * pairs * s.latent * 4);
  return layout;
}

bool peerMegaMoEFits(const kernels::PeerMegaMoEShape &s) {
  // Warp rows of gate/up (2) and down (4); output chunks of 128 columns.
  return s.members >= 2 && s.intermediate % 32 == 0 && s.latent % 128 == 0 && s.maxRows >= 1;
}

kernels::Work peerMegaMoEWork(const kernels::PeerMegaMoEShape &s) {
  // Enough warps for the larger phase at max rows; the runtime keeps the
  // grid to what stays resident.
  int64_t items = s.maxRows * s.k * std::max(s.intermediate / 2, s.latent / 4);
  int64_t blocks = (items + kWarps - 1) / kWarps;
  return kernels::Work{blocks * kThreads, 0, kThreads};
}

kernels::KernelSpec peerMegaMoE(const kernels::PeerMegaMoEShape &s) {
  const int64_t E = s.experts, K = s.k, I = s.intermediate, L = s.latent, R = s.maxRows;
  const std::string fmt = s.nvfp4 ? "_nvfp4" : "_bf16";
  const std::string name = "megamoe_peer_" + str(E) + "e_top" + str(K) + "_" + str(I) + "x" +
                           str(L) + "_m" + str(s.members) + "_r" + str(R) +
                           kernels::epsSuffix(s.eps) + fmt;
  const PeerSiteLayout layout = peerSiteLayout(s);
  const std::string zt = "memref<?x" + str(L) + "xf32>", it = "memref<?x" + str(K) + "xi32>";
  const std::string ht = "memref<?x" + str(K) + "x" + str(I) + "xf32>";
  const std::string sqt = "memref<?x" + str(K) + "x" + str(L / 4) + "xf32>";
  const std::string pnt = "memref<" + str(E) + "x" + str(L) + "xbf16>";
  warp::ExpertProjection gate = warp::expertProjection("gate", E, I, L, s.nvfp4, {"%o0", "%o1"});
  warp::ExpertProjection up = warp::expertProjection("up", E, I, L, s.nvfp4, {"%o0", "%o1"});
  warp::ExpertProjection down =
      warp::expertProjection("down", E, L, I, s.nvfp4, {"%o0", "%o1", "%o2", "%o3"});
  std::vector<warp::WeightRow> gateUpRows = gate.rows;
  gateUpRows.insert(gateUpRows.end(), up.rows.begin(), up.rows.end());

  std::string body = fillTemplate(R"(
func.func @@@name@@(%z: @@zt@@, %idx: @@it@@, %wts: memref<?x@@K@@xf32>, @@gargs@@, @@uargs@@,
                    @@dargs@@, %pn: @@pnt@@, %h: @@ht@@, %ssq: @@sqt@@,
                    %peers: memref<@@M@@xi64>, %y: @@zt@@, %rows_i: i64, %member: i64,
                    %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface,
                kiln.tiling = {kind = "persistent", exchange = "peer", members = @@M@@ : i64, site_bytes = @@site@@ : i64}} {
@@ids@@
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %kk = arith.constant @@K@@ : index
  %mm = arith.constant @@M@@ : index
  %width = arith.constant @@L@@ : index
  %chunks = arith.constant @@L128@@ : index
  %per1 = arith.constant @@KI2@@ : index
  %groups1 = arith.constant @@I2@@ : index
  %per2 = arith.constant @@KL4@@ : index
  %groups2 = arith.constant @@L4@@ : index
  %groups2_i64 = arith.constant @@L4@@ : i64
  %one_f = arith.constant 1.0 : f32
  %widthf = arith.constant @@Lf@@ : f32
  %eps = arith.constant @@eps@@ : f32
  %zero_v = arith.constant dense<0.0> : vector<4xf32>
  %zero_f = arith.constant 0.0 : f32
  %c0_i32 = arith.constant 0 : i32
  %w32 = arith.constant 32 : i32
  %c0_i64 = arith.constant 0 : i64
  %c1_i64 = arith.constant 1 : i64
  %c2_i64 = arith.constant 2 : i64
  %c4_i64 = arith.constant 4 : i64
  %c8_i64 = arith.constant 8 : i64
  %pairs_off = arith.constant @@pairs@@ : i64
  %flags_off = arith.constant @@flags@@ : i64
  %coefs_off = arith.constant @@coefs@@ : i64
  %data_off = arith.constant @@data@@ : i64
  %flags_parity = arith.constant @@flagsParity@@ : i64
  %coefs_parity = arith.constant @@coefsParity@@ : i64
  %data_parity = arith.constant @@dataParity@@ : i64
  %experts_i32 = arith.constant @@E@@ : i32
  %tid = gpu.thread_id x
  %nblocks = gpu.grid_dim x
  %lead = arith.cmpi eq, %lane, %c0 : index
  %thread0 = arith.cmpi eq, %tid, %c0 : index
  %lane4 = arith.muli %lane, %c4 : index
  %rows = arith.index_cast %rows_i : i64 to index
  %member_x = arith.index_cast %member : i64 to index
  %member_i32 = arith.trunci %member : i64 to i32
  %first_e = arith.muli %member_i32, %experts_i32 : i32
  %site = memref.load %peers[%member_x] : memref<@@M@@xi64>
  %pairs_at = arith.addi %site, %pairs_off : i64
  %ssq_x = memref.extract_aligned_pointer_as_index %ssq : @@sqt@@ -> index
  %ssq_at = arith.index_cast %ssq_x : index to i64
  // This site's launches so far: its grid-barrier count over the grid,
  // which no block of this launch can have completed yet.
@@seen@@  %blocks_i64 = arith.index_cast %nblocks : index to i64
  %epoch = arith.divui %seen, %blocks_i64 : i64
  %stamp = arith.addi %epoch, %c1_i64 : i64
  %parity = arith.remui %epoch, %c2_i64 : i64
  %flags_p = arith.muli %parity, %flags_parity : i64
  %flags_base = arith.addi %flags_off, %flags_p : i64
  %coefs_p = arith.muli %parity, %coefs_parity : i64
  %coefs_base = arith.addi %coefs_off, %coefs_p : i64
  %data_p = arith.muli %parity, %data_parity : i64
  %data_base = arith.addi %data_off, %data_p : i64
  %items1 = arith.muli %rows, %per1 : index
  %items2 = arith.muli %rows, %per2 : index
  %items3 = arith.muli %rows, %chunks : index

  // 1. h = silu(gate z) * (up z) for this rank's pairs.
@@loop1@@@@gglob@@@@uglob@@@@dot1@@@@s0@@@@s1@@@@s2@@@@s3@@
    scf.if %lead {
@@swiglu@@    }
    }
  }

  // 2. Every block's h is written.
  gpu.barrier
  scf.if %thread0 {
@@arrive@@    %target = arith.muli %stamp, %blocks_i64 : i64
@@barrier@@  }
  gpu.barrier

  // 3. Down rows, four a warp, each sent to every member as soon as it is
  // computed (times the expert's post-norm); the warp that completes a pair
  // adds its rows' sums of squares and sends the pair's coefficient
  // (routing weight / RMS) and flag.
@@loop2@@@@dglob@@@@dot2@@@@d0@@@@d1@@@@d2@@@@d3@@
    %pair = arith.muli %t, %kk : index
    %pair_j = arith.addi %pair, %j : index
    %pair_i64 = arith.index_cast %pair_j : index to i64
    %last = scf.if %lead -> (i32) {
      %pb = vector.load %pn[%e, %o0] {alignment = 8} : @@pnt@@, vector<4xbf16>
      %pf = arith.extf %pb : vector<4xbf16> to vector<4xf32>
      %u0_p = vector.extract %pf[0] : f32 from vector<4xf32>
      %u1_p = vector.extract %pf[1] : f32 from vector<4xf32>
      %u2_p = vector.extract %pf[2] : f32 from vector<4xf32>
      %u3_p = vector.extract %pf[3] : f32 from vector<4xf32>
      %u0 = arith.mulf %y0, %u0_p : f32
      %u1 = arith.mulf %y1, %u1_p : f32
      %u2 = arith.mulf %y2, %u2_p : f32
      %u3 = arith.mulf %y3, %u3_p : f32
      %q0 = arith.mulf %y0, %y0 : f32
      %q01 = math.fma %y1, %y1, %q0 : f32
      %q012 = math.fma %y2, %y2, %q01 : f32
      %q = math.fma %y3, %y3, %q012 : f32
      memref.store %q, %ssq[%t, %j, %group] : @@sqt@@
      %row_at = arith.muli %pair_j, %width : index
      %el_at = arith.addi %row_at, %o0 : index
      %el_i64 = arith.index_cast %el_at : index to i64
      %el_b = arith.muli %el_i64, %c4_i64 : i64
      %to = arith.addi %data_base, %el_b : i64
      scf.for %m = %c0 to %mm step %c1 {
        %peer = memref.load %peers[%m] : memref<@@M@@xi64>
        %pa = arith.addi %peer, %to : i64
        llvm.inline_asm has_side_effects "st.global.v4.f32 [$0], {$1, $2, $3, $4};", "l,f,f,f,f,~{memory}" %pa, %u0, %u1, %u2, %u3 : (i64, f32, f32, f32, f32) -> ()
      }
      %pair_b = arith.muli %pair_i64, %c8_i64 : i64
      %pair_at = arith.addi %pairs_at, %pair_b : i64
      // System scope: the rows just stored to the members come first.
@@count@@      %count = arith.addi %old, %c1_i64 : i64
      %full = arith.cmpi eq, %count, %groups2_i64 : i64
      scf.if %full {
@@reset@@      }
      %full_i32 = arith.extui %full : i1 to i32
      scf.yield %full_i32 : i32
    } else {
      scf.yield %c0_i32 : i32
    }
    %last_w, %last_ok = gpu.shuffle idx %last, %c0_i32, %w32 : i32
    %is_last = arith.cmpi ne, %last_w, %c0_i32 : i32
    scf.if %is_last {
@@fenceGpu@@
      %sq_row = arith.muli %pair_j, %groups2 : index
      %sqs = scf.for %g = %lane to %groups2 step %c32 iter_args(%s = %zero_f) -> (f32) {
        %ge = arith.addi %sq_row, %g : index
        %ge_i64 = arith.index_cast %ge : index to i64
        %gb = arith.muli %ge_i64, %c4_i64 : i64
        %ga = arith.addi %ssq_at, %gb : i64
@@loadSq@@
        %n = arith.addf %s, %v : f32
        scf.yield %n : f32
      }
@@sumSq@@
      %mean = arith.divf %ss, %widthf : f32
      %me = arith.addf %mean, %eps : f32
      %rms = math.sqrt %me : f32
      %inv = arith.divf %one_f, %rms : f32
      %wj = memref.load %wts[%t, %j] : memref<?x@@K@@xf32>
      %coef = arith.mulf %wj, %inv : f32
      scf.if %lead {
        %coef_b = arith.muli %pair_i64, %c4_i64 : i64
        %coef_o = arith.addi %coefs_base, %coef_b : i64
        scf.for %m = %c0 to %mm step %c1 {
          %peer = memref.load %peers[%m] : memref<@@M@@xi64>
          %ca = arith.addi %peer, %coef_o : i64
          llvm.inline_asm has_side_effects "st.global.f32 [$0], $1;", "l,f,~{memory}" %ca, %coef : (i64, f32) -> ()
        }
@@fenceSys@@
        %flag_b = arith.muli %pair_i64, %c8_i64 : i64
        %flag_o = arith.addi %flags_base, %flag_b : i64
        scf.for %m = %c0 to %mm step %c1 {
          %peer = memref.load %peers[%m] : memref<@@M@@xi64>
          %fa = arith.addi %peer, %flag_o : i64
@@flag@@        }
      }
    }
    }
  }

  // 4. y = sum over a token's k choices, in order, of coefficient x rows.
  scf.for %item = %warp to %items3 step %warps {
    %t = arith.divui %item, %chunks : index
    %chunk = arith.remui %item, %chunks : index
    %cc = arith.muli %chunk, %c128 : index
    %c = arith.addi %cc, %lane4 : index
    %tk = arith.muli %t, %kk : index
    scf.if %lead {
      scf.for %j = %c0 to %kk step %c1 {
        %pj = arith.addi %tk, %j : index
        %pj_i64 = arith.index_cast %pj : index to i64
        %fb = arith.muli %pj_i64, %c8_i64 : i64
        %fo = arith.addi %flags_base, %fb : i64
        %fa = arith.addi %site, %fo : i64
@@wait@@      }
    }
@@warpSync@@
    %acc = scf.for %j = %c0 to %kk step %c1 iter_args(%a = %zero_v) -> (vector<4xf32>) {
      %pj = arith.addi %tk, %j : index
      %pj_i64 = arith.index_cast %pj : index to i64
      %cb = arith.muli %pj_i64, %c4_i64 : i64
      %co = arith.addi %coefs_base, %cb : i64
      %ca = arith.addi %site, %co : i64
@@loadCoef@@
      %cv = vector.broadcast %v : f32 to vector<4xf32>
      %pw = arith.muli %pj, %width : index
      %pc = arith.addi %pw, %c : index
      %pc_i64 = arith.index_cast %pc : index to i64
      %pb = arith.muli %pc_i64, %c4_i64 : i64
      %po = arith.addi %data_base, %pb : i64
      %pa = arith.addi %site, %po : i64
@@loadRows@@
      %n = vector.fma %rv, %cv, %a : vector<4xf32>
      scf.yield %n : vector<4xf32>
    }
    vector.store %acc, %y[%t, %c] {alignment = 16} : @@zt@@, vector<4xf32>
  }
  return
}
)",
                                  {{"name", name},
                                   {"zt", zt},
                                   {"it", it},
                                   {"ht", ht},
                                   {"sqt", sqt},
                                   {"pnt", pnt},
                                   {"K", str(K)},
                                   {"E", str(E)},
                                   {"M", str(s.members)},
                                   {"L", str(L)},
                                   {"L128", str(L / 128)},
                                   {"L4", str(L / 4)},
                                   {"KL4", str(K * L / 4)},
                                   {"I2", str(I / 2)},
                                   {"KI2", str(K * I / 2)},
                                   {"Lf", kernels::floatLiteral(double(L))},
                                   {"eps", kernels::floatLiteral(s.eps)},
                                   {"site", str(layout.bytes)},
                                   {"pairs", str(layout.pairs)},
                                   {"flags", str(layout.flags)},
                                   {"data", str(layout.data)},
                                   {"coefs", str(layout.coefs)},
                                   {"flagsParity", str(R * K * 8)},
                                   {"coefsParity", str(R * K * 4)},
                                   {"dataParity", str(R * K * L * 4)},
                                   {"gargs", gate.args},
                                   {"uargs", up.args},
                                   {"dargs", down.args},
                                   {"ids", warp::warpIds()},
                                   {"seen", asmLoad64("%seen", "%site", "relaxed.gpu")},
                                   {"loop1", pairItemLoop("%items1", "%per1", "%groups1", 2, K)},
                                   {"gglob", gate.globalLoad},
                                   {"uglob", up.globalLoad},
                                   {"dot1", warp::rowsDot(gateUpRows, s.nvfp4, "%z", zt, "%t", L,
                                                          {"gd0", "gd1", "ud0", "ud1"})},
                                   {"s0", warp::warpSum("gd0", "g0")},
                                   {"s1", warp::warpSum("gd1", "g1")},
                                   {"s2", warp::warpSum("ud0", "u0")},
                                   {"s3", warp::warpSum("ud1", "u1")},
                                   {"swiglu", warp::swiGluStore("%h", ht)},
                                   {"arrive", asmAdd64("%arrived", "%site", "release.gpu")},
                                   {"barrier", spinUntil("%grid", "%site", "%target", "gpu")},
                                   {"loop2", pairItemLoop("%items2", "%per2", "%groups2", 4, K)},
                                   {"dglob", down.globalLoad},
                                   {"dot2", warp::rowsDot(down.rows, s.nvfp4, "%h", ht, "%t, %j", I,
                                                          {"yd0", "yd1", "yd2", "yd3"})},
                                   {"d0", warp::warpSum("yd0", "y0")},
                                   {"d1", warp::warpSum("yd1", "y1")},
                                   {"d2", warp::warpSum("yd2", "y2")},
                                   {"d3", warp::warpSum("yd3", "y3")},
                                   {"count", asmAdd64("%old", "%pair_at", "acq_rel.sys")},
                                   {"reset", asmStore64("%pair_at", "%c0_i64", "relaxed.gpu")},
                                   {"fenceGpu", asmFence("gpu")},
                                   {"fenceSys", asmFence("sys")},
                                   {"warpSync", asmWarpSync()},
                                   {"loadSq", loadVolatile1("%v", "%ga")},
                                   {"loadCoef", loadVolatile1("%v", "%ca")},
                                   {"sumSq", warp::warpSum("sqs", "ss")},
                                   {"flag", asmStore64("%fa", "%stamp", "relaxed.sys")},
                                   {"wait", spinUntil("%flag", "%fa", "%stamp", "sys")},
                                   {"loadRows", loadVolatile4("%rv", "%pa")}});
  return kernels::textKernel(name, "kiln.megamoe", body);
}

} // namespace kiln::nvptx
