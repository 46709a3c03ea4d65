#include "targets/nvptx/MmaTile.h"

#include "targets/common/KernelSpec.h"
#include "targets/common/WarpSnippets.h"

namespace kiln::nvptx {
namespace {

using kernels::fillTemplate;
using kernels::str;

// Words (bf16 pairs) a shared-memory tile row holds: the k step's 16 words
// and 4 of padding, which puts the 8 rows a fragment load touches on
// distinct banks.
constexpr int64_t kRowWords = kMmaTileK / 2 + 4;
// The warp grid of a block: 2 x 4 warps, each 64 x 32 of the tile, which is
// 4 x 4 mma tiles of 16 x 8.
constexpr int64_t kSubM = 4, kSubN = 4;
constexpr const char *kAccType = "!llvm.struct<(f32, f32, f32, f32)>";

std::string tileName(const std::string &prefix, int64_t i, int64_t j) {
  return prefix + str(i) + "_" + str(j);
}

// The staged registers `P`a0..3 (f32) and `P`b0..1 (bf16) into the shared
// tiles: activations as a bf16 high part (%sa) and remainder (%sl).
std::string stageStores(const std::string &P) {
  std::string text;
  for (int64_t i = 0; i < 4; ++i) {
    std::string I = str(i), S = "%st_a" + I;
    text += "      " + S + "h = arith.truncf " + P + "a" + I +
            " : vector<4xf32> to vector<4xbf16>\n" + "      " + S + "hf = arith.extf " + S +
            "h : vector<4xbf16> to vector<4xf32>\n" + "      " + S + "r = arith.subf " + P + "a" +
            I + ", " + S + "hf : vector<4xf32>\n" + "      " + S + "l = arith.truncf " + S +
            "r : vector<4xf32> to vector<4xbf16>\n" + "      " + S + "hw = vector.bitcast " + S +
            "h : vector<4xbf16> to vector<2xi32>\n" + "      " + S + "lw = vector.bitcast " + S +
            "l : vector<4xbf16> to vector<2xi32>\n" + "      vector.store " + S +
            "hw, %sa[%lrow, %wa" + I + "] {alignment = 8} : @@st@@, vector<2xi32>\n" +
            "      vector.store " + S + "lw, %sl[%lrow, %wa" + I +
            "] {alignment = 8} : @@st@@, vector<2xi32>\n";
  }
  for (int64_t i = 0; i < 2; ++i) {
    std::string I = str(i);
    text += "      %st_b" + I + "w = vector.bitcast " + P + "b" + I +
            " : vector<8xbf16> to vector<4xi32>\n" + "      vector.store %st_b" + I +
            "w, %sb[%lrow, %wb" + I + "] {alignment = 16} : @@st@@, vector<4xi32>\n";
  }
  return text;
}

std::string fragmentLoad(const std::string &name, const std::string &tile, const std::string &row,
                         const std::string &col) {
  return "      " + name + " = memref.load " + tile + "[" + row + ", " + col + "] : @@st@@\n";
}

// The 16 mma of one k16 slice of activation tile `tile` (words `kk` * 8 .. +
// 8 of its rows) with the B fragments %fb<kk>_<j>_*, from the accumulators
// `in`<i>_<j> into `out`<i>_<j>.
std::string mmaPass(int64_t kk, const std::string &tile, const std::string &in,
                    const std::string &out) {
  std::string K = str(kk), T = tile.substr(1), text;
  std::string lo = "%fc" + str(kk * 8), hi = "%fc" + str(kk * 8 + 4);
  for (int64_t i = 0; i < kSubM; ++i) {
    std::string F = "%fa" + T + K + "_" + str(i) + "_", I = str(i);
    text +=
        fragmentLoad(F + "0", tile, "%ra" + I, lo) + fragmentLoad(F + "1", tile, "%ra8_" + I, lo) +
        fragmentLoad(F + "2", tile, "%ra" + I, hi) + fragmentLoad(F + "3", tile, "%ra8_" + I, hi);
  }
  for (int64_t i = 0; i < kSubM; ++i)
    for (int64_t j = 0; j < kSubN; ++j) {
      std::string C = tileName(in, i, j), D = tileName(out, i, j);
      std::string A = "%fa" + T + K + "_" + str(i) + "_", B = "%fb" + K + "_" + str(j) + "_";
      std::string cs;
      for (int64_t e = 0; e < 4; ++e) {
        std::string ce = C + "_" + T + K + "e" + str(e);
        text +=
            "      " + ce + " = llvm.extractvalue " + C + "[" + str(e) + "] : " + kAccType + "\n";
        cs += (e ? ", " : "") + ce;
      }
      text += "      " + D + " = nvvm.mma.sync A[" + A + "0, " + A + "1, " + A + "2, " + A +
              "3] B[" + B + "0, " + B + "1] C[" + cs +
              "] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, "
              "multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = "
              "#nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>} : (i32, i32, "
              "f32) -> " +
              kAccType + "\n";
    }
  return text;
}

// A whole k step: for each k16 slice, the B fragments, then the high and
// the remainder passes. Accumulators %acc -> %fin.
std::string mmaStep() {
  std::string text, in = "%acc";
  for (int64_t kk = 0; kk < 2; ++kk) {
    std::string lo = "%fc" + str(kk * 8), hi = "%fc" + str(kk * 8 + 4);
    for (int64_t j = 0; j < kSubN; ++j) {
      std::string F = "%fb" + str(kk) + "_" + str(j) + "_";
      text += fragmentLoad(F + "0", "%sb", "%rb" + str(j), lo) +
              fragmentLoad(F + "1", "%sb", "%rb" + str(j), hi);
    }
    std::string mid = "%hi" + str(kk) + "_", out = kk == 1 ? std::string("%fin") : "%lo0_";
    text += mmaPass(kk, "%sa", in, mid) + mmaPass(kk, "%sl", mid, out);
    in = out;
  }
  return text;
}

} // namespace

std::string mmaActivationLoad(const std::string &x, const std::string &xType,
                              const std::string &rowIdx, const std::string &P,
                              const std::string &at) {
  std::string text;
  for (int64_t i = 0; i < 4; ++i) {
    std::string K = P + "k" + str(i);
    text += "      " + K + "_off = arith.constant " + str(4 * i) + " : index\n" + "      " + K +
            "_in = arith.addi %lk, " + K + "_off : index\n" + "      " + K + " = arith.addi " + at +
            ", " + K + "_in : index\n" + "      " + P + "a" + str(i) + " = vector.load " + x + "[" +
            rowIdx + ", " + K + "] {alignment = 16} : " + xType + ", vector<4xf32>\n";
  }
  return text;
}

std::string mmaTileKernelText(const MmaTileKernel &kernel) {
  std::string st =
      "memref<" + str(kMmaTileM) + "x" + str(kRowWords) + "xi32, #gpu.address_space<workgroup>>";
  std::string fragments;
  for (int64_t i = 0; i < kSubM; ++i) {
    std::string I = str(i);
    fragments += "    %ra" + I + "_off = arith.constant " + str(i * 16) + " : index\n" + "    %ra" +
                 I + "_w = arith.addi %wrow, %ra" + I + "_off : index\n" + "    %ra" + I +
                 " = arith.addi %ra" + I + "_w, %g : index\n" + "    %ra8_" + I +
                 " = arith.addi %ra" + I + ", %c8 : index\n";
  }
  for (int64_t j = 0; j < kSubN; ++j) {
    std::string J = str(j);
    fragments += "    %rb" + J + "_off = arith.constant " + str(j * 8) + " : index\n" + "    %rb" +
                 J + "_w = arith.addi %wcol, %rb" + J + "_off : index\n" + "    %rb" + J +
                 " = arith.addi %rb" + J + "_w, %g : index\n";
  }
  for (int64_t w = 0; w < 16; w += 4)
    fragments += "    %fc" + str(w) + "_off = arith.constant " + str(w) + " : index\n" + "    %fc" +
                 str(w) + " = arith.addi %t, %fc" + str(w) + "_off : index\n";

  std::string accArgs, accTypes, accYield;
  for (int64_t i = 0; i < kSubM; ++i)
    for (int64_t j = 0; j < kSubN; ++j) {
      std::string sep = accArgs.empty() ? "" : ", ";
      accArgs += sep + tileName("%acc", i, j) + " = %zero";
      accTypes += sep + kAccType;
      accYield += sep + tileName("%fin", i, j);
    }
  std::string staged = "vector<4xf32>, vector<4xf32>, vector<4xf32>, vector<4xf32>, "
                       "vector<8xbf16>, vector<8xbf16>";

  std::string text;
  for (const char *tile : {"a", "l", "b"})
    text += "memref.global \"private\" @" + kernel.name + "_" + tile + " : " + st + "\n";
  text += R"(
func.func @@@name@@(@@args@@, %part: i64, %parts: i64)
    attributes {llvm.emit_c_interface, kiln.tiling = {@@tiling@@}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c6 = arith.constant 6 : index
  %c8 = arith.constant 8 : index
  %c12 = arith.constant 12 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %kdim = arith.constant @@k@@ : index
  %k_last = arith.constant @@k_last@@ : index
  %tid = gpu.thread_id x
  %bid = gpu.block_id x
@@setup@@
  scf.if %live {
    %sa = memref.get_global @@@name@@_a : @@st@@
    %sl = memref.get_global @@@name@@_l : @@st@@
    %sb = memref.get_global @@@name@@_b : @@st@@
    %warp = arith.divui %tid, %c32 : index
    %lane = arith.remui %tid, %c32 : index
    %wm = arith.divui %warp, %c4 : index
    %wn = arith.remui %warp, %c4 : index
    %g = arith.divui %lane, %c4 : index
    %t = arith.remui %lane, %c4 : index
    // This thread stages half a k step of tile row %lrow: activations and weights.
    %lrow = arith.divui %tid, %c2 : index
    %lhalf = arith.remui %tid, %c2 : index
    %lk = arith.muli %lhalf, %c16 : index
    %lword = arith.muli %lhalf, %c8 : index
    %wa0 = arith.addi %lword, %c0 : index
    %wa1 = arith.addi %lword, %c2 : index
    %wa2 = arith.addi %lword, %c4 : index
    %wa3 = arith.addi %lword, %c6 : index
    %wb0 = arith.addi %lword, %c0 : index
    %wb1 = arith.addi %lword, %c4 : index
    %wrow = arith.muli %wm, %c64 : index
    %wcol = arith.muli %wn, %c32 : index
@@rows@@
@@fragments@@
@@prologue@@
    %zero = llvm.mlir.zero : @@acc_type@@
    %res:@@carried@@ = scf.for %k0 = @@k_begin@@ to @@k_end@@ step %c32 iter_args(@@acc_args@@, %pa0 = %p0_a0, %pa1 = %p0_a1, %pa2 = %p0_a2, %pa3 = %p0_a3, %pb0 = %p0_b0, %pb1 = %p0_b1) -> (@@acc_types@@, @@staged@@) {
@@stores@@
      gpu.barrier
      %k_after = arith.addi %k0, %c32 : index
      %k_next = arith.minui %k_after, @@k_final@@ : index
@@load_next@@
@@step@@
@@finish_next@@
      gpu.barrier
      scf.yield @@acc_yield@@, %nx_a0, %nx_a1, %nx_a2, %nx_a3, %nx_b0, %nx_b1 : @@acc_types@@, @@staged@@
    }
@@epilogue@@
  }
  return
}
)";
  // Two fills: the snippets' own @@st@@ resolves in the second.
  text = fillTemplate(text, {{"name", kernel.name},
                             {"args", kernel.args},
                             {"tiling", kernel.tiling},
                             {"setup", kernel.setup},
                             {"rows", kernel.rows},
                             {"fragments", fragments},
                             {"prologue", kernel.load("%p0_", kernel.kRange ? "%k_begin" : "%c0") +
                                              kernel.finish("%p0_")},
                             {"stores", stageStores("%p")},
                             {"load_next", kernel.load("%nx_", "%k_next")},
                             {"step", mmaStep()},
                             {"finish_next", kernel.finish("%nx_")},
                             {"epilogue", kernel.epilogue},
                             {"acc_args", accArgs},
                             {"acc_types", accTypes},
                             {"acc_yield", accYield},
                             {"acc_type", kAccType},
                             {"staged", staged},
                             {"carried", str(kSubM * kSubN + 6)},
                             {"st", "@@st@@"},
                             {"k", str(kernel.k)},
                             {"k_last", str(kernel.k - kMmaTileK)},
                             {"k_begin", kernel.kRange ? "%k_begin" : "%c0"},
                             {"k_end", kernel.kRange ? "%k_end" : "%kdim"},
                             {"k_final", kernel.kRange ? "%k_final" : "%k_last"}});
  return fillTemplate(text, {{"st", st}});
}

} // namespace kiln::nvptx
