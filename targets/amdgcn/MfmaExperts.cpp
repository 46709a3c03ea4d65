#include "targets/amdgcn/MfmaExperts.h"

#include "targets/amdgcn/MfmaGemm.h"

#include "targets/common/WarpSnippets.h"

#include <functional>

namespace kiln::amdgcn {
namespace {

using kernels::ExpertTileShape;
using kernels::fillTemplate;
using kernels::str;

constexpr int64_t kTile = 32, kWaves = 4, kThreads = 64 * kWaves;

// An expert projection [E, out, in]: its arguments and, for NVFP4, its
// codes' and scales' types.
struct Projection {
  std::string args, type, scalesType;
};
Projection projection(const std::string &w, const ExpertTileShape &s, int64_t out, int64_t in) {
  std::string E = str(s.experts), O = str(out);
  Projection p;
  if (!s.nvfp4) {
    p.type = "memref<" + E + "x" + O + "x" + str(in) + "xbf16>";
    p.args = "%" + w + ": " + p.type;
    return p;
  }
  p.type = "memref<" + E + "x" + O + "x" + str(in / 2) + "xi8>";
  p.scalesType = "memref<" + E + "x" + O + "x" + str(in / 16) + "xi8>";
  p.args = "%" + w + ": " + p.type + ", %" + w + "_s: " + p.scalesType + ", %" + w + "_g: memref<" +
           E + "xf32>";
  return p;
}

// Lane's B operand for projection `w` at k step %kk: 4 weights of row %col
// of expert %e, as vector<4xi16> `%<w>_b`. NVFP4: 2 bytes of codes and their
// block's E4M3 scale, placed into f16 bits (code x 2^-14, scale x 2^-8) and
// their product times 2^22, exact in bf16.
std::string weightOperand(const std::string &w, const Projection &p, bool nvfp4) {
  if (!nvfp4)
    return fillTemplate(R"(
      %@@w@@_v = vector.load %@@w@@[%e, %col, %kk] {alignment = 8} : @@t@@, vector<4xbf16>
      %@@w@@_b = vector.bitcast %@@w@@_v : vector<4xbf16> to vector<4xi16>
)",
                        {{"w", w}, {"t", p.type}});
  return fillTemplate(R"(
      %@@w@@_kb = arith.divui %kk, %c2 : index
      %@@w@@_codes = vector.load %@@w@@[%e, %col, %@@w@@_kb] {alignment = 2} : @@t@@, vector<2xi8>
      %@@w@@_blk = arith.divui %kk, %c16 : index
      %@@w@@_sc = memref.load %@@w@@_s[%e, %col, %@@w@@_blk] : @@st@@
      %@@w@@_c16 = arith.extui %@@w@@_codes : vector<2xi8> to vector<2xi16>
      %@@w@@_lo = arith.andi %@@w@@_c16, %nib_mask : vector<2xi16>
      %@@w@@_hi = arith.shrui %@@w@@_c16, %nib_shift : vector<2xi16>
      %@@w@@_all = vector.shuffle %@@w@@_lo, %@@w@@_hi [0, 2, 1, 3] : vector<2xi16>, vector<2xi16>
      %@@w@@_sgn = arith.andi %@@w@@_all, %code_sign : vector<4xi16>
      %@@w@@_sgns = arith.shli %@@w@@_sgn, %code_sign_shift : vector<4xi16>
      %@@w@@_mag = arith.andi %@@w@@_all, %code_mag : vector<4xi16>
      %@@w@@_mags = arith.shli %@@w@@_mag, %code_mag_shift : vector<4xi16>
      %@@w@@_bits = arith.ori %@@w@@_sgns, %@@w@@_mags : vector<4xi16>
      %@@w@@_half = arith.bitcast %@@w@@_bits : vector<4xi16> to vector<4xf16>
      %@@w@@_vals = arith.extf %@@w@@_half : vector<4xf16> to vector<4xf32>
      %@@w@@_s16 = arith.extui %@@w@@_sc : i8 to i16
      %@@w@@_ssg = arith.andi %@@w@@_s16, %scale_sign : i16
      %@@w@@_ssgs = arith.shli %@@w@@_ssg, %scale_sign_shift : i16
      %@@w@@_smg = arith.andi %@@w@@_s16, %scale_mag : i16
      %@@w@@_smgs = arith.shli %@@w@@_smg, %scale_mag_shift : i16
      %@@w@@_sbits = arith.ori %@@w@@_ssgs, %@@w@@_smgs : i16
      %@@w@@_sh = arith.bitcast %@@w@@_sbits : i16 to f16
      %@@w@@_sf = arith.extf %@@w@@_sh : f16 to f32
      %@@w@@_sfold = arith.mulf %@@w@@_sf, %fold : f32
      %@@w@@_sv = vector.broadcast %@@w@@_sfold : f32 to vector<4xf32>
      %@@w@@_wv = arith.mulf %@@w@@_vals, %@@w@@_sv : vector<4xf32>
      %@@w@@_wb = arith.truncf %@@w@@_wv : vector<4xf32> to vector<4xbf16>
      %@@w@@_b = vector.bitcast %@@w@@_wb : vector<4xbf16> to vector<4xi16>
)",
                      {{"w", w}, {"t", p.type}, {"st", p.scalesType}});
}

constexpr const char *kNvfp4Constants = R"(
  %nib_mask = arith.constant dense<15> : vector<2xi16>
  %nib_shift = arith.constant dense<4> : vector<2xi16>
  %code_sign = arith.constant dense<8> : vector<4xi16>
  %code_sign_shift = arith.constant dense<12> : vector<4xi16>
  %code_mag = arith.constant dense<7> : vector<4xi16>
  %code_mag_shift = arith.constant dense<9> : vector<4xi16>
  %scale_sign = arith.constant 128 : i16
  %scale_sign_shift = arith.constant 8 : i16
  %scale_mag = arith.constant 127 : i16
  %scale_mag_shift = arith.constant 7 : i16
  %fold = arith.constant 4194304.0 : f32
)";

// Everything up to the k loop: the block's tile of 128 items of expert %e
// (from the lists), column tile %nt of `colTiles`, this wave's 32 items from
// %w0, and the lane's item (%t, %j: its token and choice) and column %col.
std::string tileHead(const ExpertTileShape &s, int64_t colTiles) {
  return fillTemplate(R"(
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %ck = arith.constant @@k@@ : index
  %zero_i32 = arith.constant 0 : i32
  %zero_acc = arith.constant dense<0.0> : vector<16xf32>
  %tid = gpu.thread_id x
  %bid = gpu.block_id x
  %wave = arith.divui %tid, %c64 : index
  %lane = arith.remui %tid, %c64 : index
  %l32 = arith.remui %lane, %c32 : index
  %half = arith.divui %lane, %c32 : index
  %half4 = arith.muli %half, %c4 : index
@@tile@@
  scf.if %live {
@@items@@    %w0 = arith.muli %wave, %c32 : index
    %wave_live = arith.cmpi ult, %w0, %rows_in : index
    scf.if %wave_live {
    %lrow_at = arith.addi %w0, %l32 : index
    %lrow = arith.minui %lrow_at, %last_in : index
    %lpos = arith.addi %base, %lrow : index
    %litem_i = memref.load %items[%lpos] : memref<@@mi@@xi32>
    %litem = arith.index_cast %litem_i : i32 to index
    %t = arith.divui %litem, %ck : index
    %j = arith.remui %litem, %ck : index
    %n0 = arith.muli %nt, %c32 : index
    %col = arith.addi %n0, %l32 : index
)",
                      {{"k", str(s.k)},
                       {"tile", kernels::expertTileOfBlock(s, colTiles)},
                       {"items", kernels::expertTileItems(s)},
                       {"mi", str(s.maxItems())}});
}

// The epilogue: for each of the lane's 16 results (row 8 (r / 4) + 4 (lane
// / 32) + r % 4 of the wave's 32), the item's token %ot<r> and choice %oj<r>
// and `store(r)`'s text, where the row holds an item.
std::string forEachResult(const std::function<std::string(const std::string &)> &store,
                          const std::string &mi) {
  std::string text;
  for (int64_t r = 0; r < 16; ++r) {
    std::string R = str(r);
    text += fillTemplate(R"(
    %or@@r@@_off = arith.constant @@off@@ : index
    %or@@r@@_in = arith.addi %half4, %or@@r@@_off : index
    %or@@r@@ = arith.addi %w0, %or@@r@@_in : index
    %ok@@r@@ = arith.cmpi ult, %or@@r@@, %rows_in : index
    scf.if %ok@@r@@ {
      %op@@r@@ = arith.addi %base, %or@@r@@ : index
      %oi@@r@@_i = memref.load %items[%op@@r@@] : memref<@@mi@@xi32>
      %oi@@r@@ = arith.index_cast %oi@@r@@_i : i32 to index
      %ot@@r@@ = arith.divui %oi@@r@@, %ck : index
      %oj@@r@@ = arith.remui %oi@@r@@, %ck : index
)",
                         {{"r", R}, {"off", str(8 * (r / 4) + r % 4)}, {"mi", mi}}) +
            store(R) + "    }\n";
  }
  return text;
}

} // namespace

bool mfmaExpertsFit(const ExpertTileShape &s) {
  return s.maxTokens > 1 && s.intermediate % kTile == 0 && s.latent % kTile == 0 &&
         s.intermediate % 16 == 0 && s.latent % 16 == 0 && kernels::expertListsFit(s);
}

kernels::Work mfmaExpertGateUpWork(const ExpertTileShape &s) {
  return kernels::Work{s.maxTiles() * (s.intermediate / kTile) * kThreads, 0, kThreads};
}
kernels::Work mfmaExpertDownWork(const ExpertTileShape &s) {
  return kernels::Work{s.maxTiles() * (s.latent / kTile) * kThreads, 0, kThreads};
}

kernels::KernelSpec mfmaExpertGateUp(const ExpertTileShape &s) {
  std::string name = "expert_gateup_mfma_" + kernels::expertShapeSuffix(s);
  std::string zt = "memref<?x" + str(s.latent) + "xf32>";
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  Projection gate = projection("gate", s, s.intermediate, s.latent);
  Projection up = projection("up", s, s.intermediate, s.latent);
  std::string globals =
      s.nvfp4
          ? "    %gate_glob = memref.load %gate_g[%e] : memref<" + str(s.experts) +
                "xf32>\n    %up_glob = memref.load %up_g[%e] : memref<" + str(s.experts) + "xf32>\n"
          : "    %gate_glob = arith.constant 1.0 : f32\n    %up_glob = arith.constant 1.0 : f32\n";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%z: @@zt@@, @@lists@@, @@gargs@@, @@uargs@@, %h: @@ht@@, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "mfma-experts", tile = [128, 32, 8], block = 256 : i64}} {
@@nvfp4@@@@head@@@@globals@@
    %one_f = arith.constant 1.0 : f32
    %kdim = arith.constant @@L@@ : index
    %acc:2 = scf.for %k0 = %c0 to %kdim step %c8 iter_args(%ag = %zero_acc, %au = %zero_acc) -> (vector<16xf32>, vector<16xf32>) {
      %kk = arith.addi %k0, %half4 : index
@@a@@@@gb@@@@ub@@@@m1@@@@m2@@@@m3@@@@m4@@
      scf.yield %ag2, %au2 : vector<16xf32>, vector<16xf32>
    }
@@stores@@
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"zt", zt},
                                   {"ht", ht},
                                   {"L", str(s.latent)},
                                   {"lists", kernels::expertListArgs(s)},
                                   {"gargs", gate.args},
                                   {"uargs", up.args},
                                   {"nvfp4", s.nvfp4 ? kNvfp4Constants : ""},
                                   {"head", tileHead(s, s.intermediate / kTile)},
                                   {"globals", globals},
                                   {"a", mfmaActivation("%z", zt, "%t", "%kk")},
                                   {"gb", weightOperand("gate", gate, s.nvfp4)},
                                   {"ub", weightOperand("up", up, s.nvfp4)},
                                   {"m1", mfmaStep("%ag1", "%a_hi", "%gate_b", "%ag")},
                                   {"m2", mfmaStep("%ag2", "%a_lo", "%gate_b", "%ag1")},
                                   {"m3", mfmaStep("%au1", "%a_hi", "%up_b", "%au")},
                                   {"m4", mfmaStep("%au2", "%a_lo", "%up_b", "%au1")},
                                   {"stores", forEachResult(
                                                  [&](const std::string &R) {
                                                    return fillTemplate(R"(
      %g@@r@@_raw = vector.extract %acc#0[@@r@@] : f32 from vector<16xf32>
      %u@@r@@_raw = vector.extract %acc#1[@@r@@] : f32 from vector<16xf32>
      %g@@r@@ = arith.mulf %g@@r@@_raw, %gate_glob : f32
      %u@@r@@ = arith.mulf %u@@r@@_raw, %up_glob : f32
      %ng@@r@@ = arith.negf %g@@r@@ : f32
      %ex@@r@@ = math.exp %ng@@r@@ : f32
      %den@@r@@ = arith.addf %one_f, %ex@@r@@ : f32
      %sig@@r@@ = arith.divf %g@@r@@, %den@@r@@ : f32
      %h@@r@@ = arith.mulf %sig@@r@@, %u@@r@@ : f32
      memref.store %h@@r@@, %h[%ot@@r@@, %oj@@r@@, %col] : @@ht@@
)",
                                                                        {{"r", R}, {"ht", ht}});
                                                  },
                                                  str(s.maxItems()))}});
  return kernels::textKernel(name, "kiln.megamoe", body);
}

kernels::KernelSpec mfmaExpertDown(const ExpertTileShape &s) {
  std::string name = "expert_down_mfma_" + kernels::expertShapeSuffix(s);
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  std::string yt = "memref<?x" + str(s.k) + "x" + str(s.latent) + "xf32>";
  Projection down = projection("down", s, s.latent, s.intermediate);
  std::string globals =
      s.nvfp4 ? "    %down_glob = memref.load %down_g[%e] : memref<" + str(s.experts) + "xf32>\n"
              : "    %down_glob = arith.constant 1.0 : f32\n";
  std::string body = fillTemplate(R"(
func.func @@@name@@(%hin: @@ht@@, @@lists@@, @@dargs@@, %y: @@yt@@, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "mfma-experts", tile = [128, 32, 8], block = 256 : i64}} {
@@nvfp4@@@@head@@@@globals@@
    %kdim = arith.constant @@I@@ : index
    %acc = scf.for %k0 = %c0 to %kdim step %c8 iter_args(%ad = %zero_acc) -> (vector<16xf32>) {
      %kk = arith.addi %k0, %half4 : index
@@a@@@@db@@@@m1@@@@m2@@
      scf.yield %ad2 : vector<16xf32>
    }
@@stores@@
    }
  }
  return
}
)",
                                  {{"name", name},
                                   {"ht", ht},
                                   {"yt", yt},
                                   {"I", str(s.intermediate)},
                                   {"lists", kernels::expertListArgs(s)},
                                   {"dargs", down.args},
                                   {"nvfp4", s.nvfp4 ? kNvfp4Constants : ""},
                                   {"head", tileHead(s, s.latent / kTile)},
                                   {"globals", globals},
                                   {"a", mfmaActivation("%hin", ht, "%t, %j", "%kk")},
                                   {"db", weightOperand("down", down, s.nvfp4)},
                                   {"m1", mfmaStep("%ad1", "%a_hi", "%down_b", "%ad")},
                                   {"m2", mfmaStep("%ad2", "%a_lo", "%down_b", "%ad1")},
                                   {"stores", forEachResult(
                                                  [&](const std::string &R) {
                                                    return fillTemplate(R"(
      %d@@r@@_raw = vector.extract %acc[@@r@@] : f32 from vector<16xf32>
      %d@@r@@ = arith.mulf %d@@r@@_raw, %down_glob : f32
      memref.store %d@@r@@, %y[%ot@@r@@, %oj@@r@@, %col] : @@yt@@
)",
                                                                        {{"r", R}, {"yt", yt}});
                                                  },
                                                  str(s.maxItems()))}});
  return kernels::textKernel(name, "kiln.megamoe", body);
}

} // namespace kiln::amdgcn
