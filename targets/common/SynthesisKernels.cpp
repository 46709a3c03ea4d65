// Kernels that synthesise `synthetic:SEED` weights where they live (on the
// GPU: no host generation and upload of tens of GiB a rank), bit for bit what
// models/muse_spark/SyntheticWeights.cpp writes on the host: the same
// counter-based splitmix64 stream per tensor, the same f64 shaping into a
// normal sample, the same bf16 rounding, and for NVFP4 expert projections the
// same quantisation (runtime/quant/Nvfp4.cpp: one amax per module, an E4M3
// scale per 16 values, E2M1 codes). The host passes what depends on names
// (the stream's key, the distribution) as i64 scalars; doubles as their bits.
// Every part takes elements part, part + parts, ...: on a GPU consecutive
// threads write consecutive elements.
#include "targets/common/Generators.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace kiln::kernels {
namespace {

std::string i64Literal(uint64_t bits) { return std::to_string(static_cast<int64_t>(bits)); }

// An f64 constant by its exact bits ("0x3F23988E1409212E").
std::string f64Hex(double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  char text[24];
  std::snprintf(text, sizeof text, "0x%016llX", static_cast<unsigned long long>(bits));
  return text;
}

// Constants every synthesis kernel uses.
std::string synthesisConstants() {
  // The normal's scale: sqrt(1.5) / 2^17, as the host computes it in f64.
  const double scale = 1.2247448713915890491 / 131072.0;
  return fillTemplate(R"(
  %golden = arith.constant @@golden@@ : i64
  %mix_a = arith.constant @@mixa@@ : i64
  %mix_b = arith.constant @@mixb@@ : i64
  %s16 = arith.constant 16 : i64
  %s27 = arith.constant 27 : i64
  %s30 = arith.constant 30 : i64
  %s31 = arith.constant 31 : i64
  %s32 = arith.constant 32 : i64
  %s48 = arith.constant 48 : i64
  %m16 = arith.constant 65535 : i64
  %one_i64 = arith.constant 1 : i64
  %two_i64 = arith.constant 2 : i64
  %centre = arith.constant 524280 : i64
  %normal_scale = arith.constant @@scale@@ : f64
  %bf16_half = arith.constant 32767 : i32
  %s16_i32 = arith.constant 16 : i32
  %one_i32 = arith.constant 1 : i32
  %mean = arith.bitcast %mean_bits : i64 to f64
  %stddev = arith.bitcast %std_bits : i64 to f64
)",
                      {{"golden", i64Literal(0x9e3779b97f4a7c15ull)},
                       {"mixa", i64Literal(0xbf58476d1ce4e5b9ull)},
                       {"mixb", i64Literal(0x94d049bb133111ebull)},
                       {"scale", f64Hex(scale)}});
}

// splitmix64's finaliser of i64 `in` into `%<p>`.
std::string mix64(const std::string &p, const std::string &in) {
  return fillTemplate(R"(
      %@@p@@_a = arith.shrui @@in@@, %s30 : i64
      %@@p@@_b = arith.xori @@in@@, %@@p@@_a : i64
      %@@p@@_c = arith.muli %@@p@@_b, %mix_a : i64
      %@@p@@_d = arith.shrui %@@p@@_c, %s27 : i64
      %@@p@@_e = arith.xori %@@p@@_c, %@@p@@_d : i64
      %@@p@@_f = arith.muli %@@p@@_e, %mix_b : i64
      %@@p@@_g = arith.shrui %@@p@@_f, %s31 : i64
      %@@p@@ = arith.xori %@@p@@_f, %@@p@@_g : i64
)",
                      {{"p", p}, {"in", in}});
}

// The sum of a word's four 16-bit lanes into `%<p>`.
std::string lanes16(const std::string &p, const std::string &w) {
  return fillTemplate(R"(
      %@@p@@_0 = arith.andi @@w@@, %m16 : i64
      %@@p@@_1s = arith.shrui @@w@@, %s16 : i64
      %@@p@@_1 = arith.andi %@@p@@_1s, %m16 : i64
      %@@p@@_2s = arith.shrui @@w@@, %s32 : i64
      %@@p@@_2 = arith.andi %@@p@@_2s, %m16 : i64
      %@@p@@_3 = arith.shrui @@w@@, %s48 : i64
      %@@p@@_01 = arith.addi %@@p@@_0, %@@p@@_1 : i64
      %@@p@@_23 = arith.addi %@@p@@_2, %@@p@@_3 : i64
      %@@p@@ = arith.addi %@@p@@_01, %@@p@@_23 : i64
)",
                      {{"p", p}, {"w", w}});
}

// Element `index` (i64) of the stream %key: f32 mean + stddev * normal,
// rounded to bf16 (RNE), as `%<p>_bits` (i32, the bf16 in the high half) and
// `%<p>` (its f32 value).
std::string sample(const std::string &p, const std::string &index) {
  return fillTemplate(R"(
      %@@p@@_i2 = arith.muli @@index@@, %two_i64 : i64
      %@@p@@_i1 = arith.addi %@@p@@_i2, %one_i64 : i64
      %@@p@@_i2b = arith.addi %@@p@@_i1, %one_i64 : i64
      %@@p@@_k1 = arith.muli %@@p@@_i1, %golden : i64
      %@@p@@_k2 = arith.muli %@@p@@_i2b, %golden : i64
      %@@p@@_x1 = arith.addi %key, %@@p@@_k1 : i64
      %@@p@@_x2 = arith.addi %key, %@@p@@_k2 : i64
@@mix1@@@@mix2@@@@l1@@@@l2@@
      %@@p@@_sum = arith.addi %@@p@@_l1, %@@p@@_l2 : i64
      %@@p@@_twice = arith.muli %@@p@@_sum, %two_i64 : i64
      %@@p@@_centred = arith.subi %@@p@@_twice, %centre : i64
      %@@p@@_nf = arith.sitofp %@@p@@_centred : i64 to f64
      %@@p@@_normal = arith.mulf %@@p@@_nf, %normal_scale : f64
      %@@p@@_scaled = arith.mulf %stddev, %@@p@@_normal : f64
      %@@p@@_d = arith.addf %mean, %@@p@@_scaled : f64
      %@@p@@_f = arith.truncf %@@p@@_d : f64 to f32
      %@@p@@_fb = arith.bitcast %@@p@@_f : f32 to i32
      %@@p@@_lsb0 = arith.shrui %@@p@@_fb, %s16_i32 : i32
      %@@p@@_lsb = arith.andi %@@p@@_lsb0, %one_i32 : i32
      %@@p@@_r0 = arith.addi %@@p@@_fb, %bf16_half : i32
      %@@p@@_r = arith.addi %@@p@@_r0, %@@p@@_lsb : i32
      %@@p@@_hi = arith.shrui %@@p@@_r, %s16_i32 : i32
      %@@p@@_bits = arith.shli %@@p@@_hi, %s16_i32 : i32
      %@@p@@ = arith.bitcast %@@p@@_bits : i32 to f32
)",
                      {{"p", p},
                       {"index", index},
                       {"mix1", mix64(p + "_m1", "%" + p + "_x1")},
                       {"mix2", mix64(p + "_m2", "%" + p + "_x2")},
                       {"l1", lanes16(p + "_l1", "%" + p + "_m1")},
                       {"l2", lanes16(p + "_l2", "%" + p + "_m2")}});
}

// The full-tensor index of element (%r, %c) of a piece at (%row0, %col0) of
// a tensor %full_cols wide, into `%<p>`.
std::string pieceIndex(const std::string &p, const std::string &r, const std::string &c) {
  return fillTemplate(R"(
      %@@p@@_r = arith.addi @@r@@, %row0 : i64
      %@@p@@_rc = arith.muli %@@p@@_r, %full_cols : i64
      %@@p@@_c = arith.addi @@c@@, %col0 : i64
      %@@p@@ = arith.addi %@@p@@_rc, %@@p@@_c : i64
)",
                      {{"p", p}, {"r", r}, {"c", c}});
}

} // namespace

KernelSpec synthesizeBf16() {
  std::string body = fillTemplate(R"(
func.func @synth_bf16(%out: memref<?xi16>, %key: i64, %rows: i64, %cols: i64, %full_cols: i64,
                      %row0: i64, %col0: i64, %mean_bits: i64, %std_bits: i64, %part: i64,
                      %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "synthesis"}} {
@@consts@@
  %count = arith.muli %rows, %cols : i64
  scf.for %i = %part to %count step %parts : i64 {
      %r = arith.divui %i, %cols : i64
      %c = arith.remui %i, %cols : i64
@@index@@@@sample@@
      %h = arith.trunci %v_hi : i32 to i16
      %ix = arith.index_cast %i : i64 to index
      memref.store %h, %out[%ix] : memref<?xi16>
  }
  return
}
)",
                                  {{"consts", synthesisConstants()},
                                   {"index", pieceIndex("at", "%r", "%c")},
                                   {"sample", sample("v", "%at")}});
  return textKernel("synth_bf16", "kiln.synthesize", body);
}

KernelSpec synthesizeNvfp4Amax() {
  // The module's amax as f32 bits (non-negative floats order as their bits):
  // each part's maximum, then an atomic max into %amax[0] (zeroed first).
  std::string body =
      fillTemplate(R"(
func.func @synth_nvfp4_amax(%amax: memref<1xi32>, %key: i64, %count: i64, %mean_bits: i64,
                            %std_bits: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "synthesis"}} {
@@consts@@
  %c0 = arith.constant 0 : index
  %zero_i32 = arith.constant 0 : i32
  %abs_mask = arith.constant 2147483647 : i32
  %m = scf.for %i = %part to %count step %parts iter_args(%a = %zero_i32) -> (i32) : i64 {
@@sample@@
      %mag = arith.andi %v_bits, %abs_mask : i32
      %n = arith.maxui %a, %mag : i32
      scf.yield %n : i32
  }
  %old = memref.atomic_rmw maxu %m, %amax[%c0] : (i32, memref<1xi32>) -> i32
  return
}
)",
                   {{"consts", synthesisConstants()}, {"sample", sample("v", "%i")}});
  return textKernel("synth_nvfp4_amax", "kiln.synthesize", body);
}

KernelSpec synthesizeNvfp4Quant() {
  // Block b of 16 values of the piece: its E4M3 scale (blockAmax / 6 /
  // global, saturating RNE) and eight bytes of E2M1 codes (value / scale,
  // ties to even), low nibble first; part 0 also writes the global scale.
  std::string values, maxChain = "%zero_f";
  for (int k = 0; k < 16; ++k) {
    std::string K = std::to_string(k);
    values += "      %ck" + K + " = arith.constant " + K + " : i64\n" + "      %colk" + K +
              " = arith.addi %cb16, %ck" + K + " : i64\n" +
              pieceIndex("at" + K, "%r", "%colk" + K) + sample("v" + K, "%at" + K) + "      %av" +
              K + " = math.absf %v" + K + " : f32\n" + "      %mx" + K + " = arith.maximumf " +
              maxChain + ", %av" + K + " : f32\n";
    maxChain = "%mx" + K;
  }
  std::string codes;
  for (int k = 0; k < 16; ++k) {
    std::string K = std::to_string(k);
    codes += fillTemplate(R"(
      %q@@k@@ = arith.divf %v@@k@@, %scale : f32
      %qa@@k@@ = math.absf %q@@k@@ : f32
      %qb@@k@@ = arith.bitcast %q@@k@@ : f32 to i32
      %qs@@k@@ = arith.shrui %qb@@k@@, %s31_i32 : i32
      %qs8_@@k@@ = arith.trunci %qs@@k@@ : i32 to i8
      %qsign@@k@@ = arith.shli %qs8_@@k@@, %three_i8 : i8
      %t0_@@k@@ = arith.cmpf ogt, %qa@@k@@, %e2_0 : f32
      %t1_@@k@@ = arith.cmpf oge, %qa@@k@@, %e2_1 : f32
      %t2_@@k@@ = arith.cmpf ogt, %qa@@k@@, %e2_2 : f32
      %t3_@@k@@ = arith.cmpf oge, %qa@@k@@, %e2_3 : f32
      %t4_@@k@@ = arith.cmpf ogt, %qa@@k@@, %e2_4 : f32
      %t5_@@k@@ = arith.cmpf oge, %qa@@k@@, %e2_5 : f32
      %t6_@@k@@ = arith.cmpf ogt, %qa@@k@@, %e2_6 : f32
      %u0_@@k@@ = arith.extui %t0_@@k@@ : i1 to i8
      %u1_@@k@@ = arith.extui %t1_@@k@@ : i1 to i8
      %u2_@@k@@ = arith.extui %t2_@@k@@ : i1 to i8
      %u3_@@k@@ = arith.extui %t3_@@k@@ : i1 to i8
      %u4_@@k@@ = arith.extui %t4_@@k@@ : i1 to i8
      %u5_@@k@@ = arith.extui %t5_@@k@@ : i1 to i8
      %u6_@@k@@ = arith.extui %t6_@@k@@ : i1 to i8
      %w01_@@k@@ = arith.addi %u0_@@k@@, %u1_@@k@@ : i8
      %w23_@@k@@ = arith.addi %u2_@@k@@, %u3_@@k@@ : i8
      %w45_@@k@@ = arith.addi %u4_@@k@@, %u5_@@k@@ : i8
      %w03_@@k@@ = arith.addi %w01_@@k@@, %w23_@@k@@ : i8
      %w46_@@k@@ = arith.addi %w45_@@k@@, %u6_@@k@@ : i8
      %mag@@k@@ = arith.addi %w03_@@k@@, %w46_@@k@@ : i8
      %code@@k@@ = arith.ori %mag@@k@@, %qsign@@k@@ : i8
)",
                          {{"k", K}});
  }
  std::string packs;
  for (int k = 0; k < 16; k += 2) {
    std::string K = std::to_string(k), K1 = std::to_string(k + 1), B = std::to_string(k / 2);
    packs += fillTemplate(R"(
      %hi@@b@@ = arith.shli %code@@k1@@, %four_i8 : i8
      %byte@@b@@ = arith.ori %code@@k@@, %hi@@b@@ : i8
      %kept@@b@@ = arith.select %live, %byte@@b@@, %zero_i8 : i8
      %cb@@b@@ = arith.constant @@b@@ : index
      %co@@b@@ = arith.addi %code_at, %cb@@b@@ : index
      memref.store %kept@@b@@, %codes[%co@@b@@] : memref<?xi8>
)",
                          {{"k", K}, {"k1", K1}, {"b", B}});
  }
  std::string body = fillTemplate(
      R"(
func.func @synth_nvfp4_quant(%codes: memref<?xi8>, %scales: memref<?xi8>, %global: memref<1xf32>,
                             %amax: memref<1xi32>, %key: i64, %rows: i64, %cols: i64,
                             %full_cols: i64, %row0: i64, %col0: i64, %mean_bits: i64,
                             %std_bits: i64, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {kind = "synthesis"}} {
@@consts@@
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %zero_f = arith.constant 0.0 : f32
  %one_f = arith.constant 1.0 : f32
  %six = arith.constant 6.0 : f32
  %e4m3_max = arith.constant 448.0 : f32
  %grid_max = arith.constant 2688.0 : f32
  %zero_i8 = arith.constant 0 : i8
  %three_i8 = arith.constant 3 : i8
  %four_i8 = arith.constant 4 : i8
  %s31_i32 = arith.constant 31 : i32
  %e2_0 = arith.constant 0.25 : f32
  %e2_1 = arith.constant 0.75 : f32
  %e2_2 = arith.constant 1.25 : f32
  %e2_3 = arith.constant 1.75 : f32
  %e2_4 = arith.constant 2.5 : f32
  %e2_5 = arith.constant 3.5 : f32
  %e2_6 = arith.constant 5.0 : f32
  %c16_i64 = arith.constant 16 : i64
  %zero_i64 = arith.constant 0 : i64
  %s23 = arith.constant 23 : i32
  %m8 = arith.constant 255 : i32
  %bias = arith.constant 127 : i32
  %min_exp = arith.constant -6 : i32
  %three_i32 = arith.constant 3 : i32
  %seven_i32 = arith.constant 7 : i32
  %eight_i32 = arith.constant 8 : i32
  %fifteen_i32 = arith.constant 15 : i32
  %max_code = arith.constant 126 : i32
  %zero_i32 = arith.constant 0 : i32
  %f64_bias = arith.constant 1023 : i64
  %s52 = arith.constant 52 : i64
  %f32_bias_m10 = arith.constant 117 : i32
  %two_m9 = arith.constant 0.001953125 : f32
  // The module's global scale; an all-zero module (or an amax whose scale
  // underflows) keeps 1 and zero codes, as the host's quantiser does.
  %amax_bits = memref.load %amax[%c0] : memref<1xi32>
  %amax_f = arith.bitcast %amax_bits : i32 to f32
  %g0 = arith.divf %amax_f, %grid_max : f32
  %amax_zero = arith.cmpf oeq, %amax_f, %zero_f : f32
  %g_zero = arith.cmpf oeq, %g0, %zero_f : f32
  %degenerate = arith.ori %amax_zero, %g_zero : i1
  %glob = arith.select %degenerate, %one_f, %g0 : f32
  %first = arith.cmpi eq, %part, %zero_i64 : i64
  scf.if %first {
    memref.store %glob, %global[%c0] : memref<1xf32>
  }
  %blocks_row = arith.divui %cols, %c16_i64 : i64
  %blocks = arith.muli %rows, %blocks_row : i64
  scf.for %b = %part to %blocks step %parts : i64 {
      %r = arith.divui %b, %blocks_row : i64
      %cbk = arith.remui %b, %blocks_row : i64
      %cb16 = arith.muli %cbk, %c16_i64 : i64
@@values@@
      // E4M3 of blockAmax / 6 / global: saturating, ties to even.
      %m0 = arith.divf %mx15, %six : f32
      %m = arith.divf %m0, %glob : f32
      %over = arith.cmpf ogt, %m, %e4m3_max : f32
      %is_zero = arith.cmpf oeq, %m, %zero_f : f32
      %mb = arith.bitcast %m : f32 to i32
      %mbe = arith.shrui %mb, %s23 : i32
      %be = arith.andi %mbe, %m8 : i32
      %e0 = arith.subi %be, %bias : i32
      %e = arith.maxsi %e0, %min_exp : i32
      %shift = arith.subi %three_i32, %e : i32
      %shift64 = arith.extsi %shift : i32 to i64
      %pb = arith.addi %f64_bias, %shift64 : i64
      %pbits = arith.shli %pb, %s52 : i64
      %pow = arith.bitcast %pbits : i64 to f64
      %md = arith.extf %m : f32 to f64
      %scaled = arith.mulf %md, %pow : f64
      %steps = math.roundeven %scaled : f64
      %units = arith.fptoui %steps : f64 to i32
      %at_min = arith.cmpi eq, %e, %min_exp : i32
      %small = arith.cmpi ult, %units, %eight_i32 : i32
      %sub = arith.andi %at_min, %small : i1
      %eb = arith.addi %e, %seven_i32 : i32
      %eb3 = arith.shli %eb, %three_i32 : i32
      %um8 = arith.subi %units, %eight_i32 : i32
      %normal_code = arith.addi %eb3, %um8 : i32
      %sc0 = arith.select %sub, %units, %normal_code : i32
      %sc1 = arith.minui %sc0, %max_code : i32
      %sc2 = arith.select %is_zero, %zero_i32, %sc1 : i32
      %sc3 = arith.select %over, %max_code, %sc2 : i32
      %scode = arith.select %degenerate, %zero_i32, %sc3 : i32
      // Its value times the global scale: the block's scale.
      %sx0 = arith.shrui %scode, %three_i32 : i32
      %sx = arith.andi %sx0, %fifteen_i32 : i32
      %sm = arith.andi %scode, %seven_i32 : i32
      %sm_f = arith.uitofp %sm : i32 to f32
      %sub_v = arith.mulf %sm_f, %two_m9 : f32
      %sm8 = arith.addi %sm, %eight_i32 : i32
      %sm8_f = arith.uitofp %sm8 : i32 to f32
      %pe = arith.addi %sx, %f32_bias_m10 : i32
      %pe_bits = arith.shli %pe, %s23 : i32
      %pe_f = arith.bitcast %pe_bits : i32 to f32
      %norm_v = arith.mulf %sm8_f, %pe_f : f32
      %sx_zero = arith.cmpi eq, %sx, %zero_i32 : i32
      %sval = arith.select %sx_zero, %sub_v, %norm_v : f32
      %scale = arith.mulf %sval, %glob : f32
      %scale_zero = arith.cmpf oeq, %scale, %zero_f : f32
      %live0 = arith.ori %scale_zero, %degenerate : i1
      %true = arith.constant true
      %live = arith.xori %live0, %true : i1
      %scode8 = arith.trunci %scode : i32 to i8
      %bx = arith.index_cast %b : i64 to index
      memref.store %scode8, %scales[%bx] : memref<?xi8>
@@codes@@
      %code_at = arith.muli %bx, %c8 : index
@@packs@@
  }
  return
}
)",
      {{"consts", synthesisConstants()}, {"values", values}, {"codes", codes}, {"packs", packs}});
  return textKernel("synth_nvfp4_quant", "kiln.synthesize", body);
}

} // namespace kiln::kernels
