#include "targets/nvptx/MmaExperts.h"

#include "targets/common/ExpertLists.h"

#include "targets/common/WarpSnippets.h"
#include "targets/nvptx/MmaTile.h"

#include <functional>

namespace kiln::nvptx {
namespace {

using kernels::fillTemplate;
using kernels::str;

// gate/up: a tile's 128 weight rows are 64 columns of gate and the same 64
// of up, interleaved 16 and 16 so that each warp holds both for its columns.
constexpr int64_t kGateUpCols = kMmaTileN / 2;

// An expert projection [E, out, in]: its kernel arguments, and for NVFP4 the
// load of its global scale as f32 %<w>_glob.
struct Projection {
  std::string args, type, scalesType, globalLoad;
};
Projection projection(const std::string &w, const MmaExpertsShape &s, int64_t out, int64_t in) {
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
  p.globalLoad = "    %" + w + "_glob = memref.load %" + w + "_g[%e] : memref<" + E + "xf32>\n";
  return p;
}

// The weight row's raw loads for the k step at `at`, into
// `out`0, `out`1 (bf16: 16 weights; NVFP4: 8 bytes of codes and their E4M3
// scale).
std::string weightLoad(const std::string &w, const Projection &p, bool nvfp4, const std::string &at,
                       const std::string &out) {
  std::string text = "        " + out + "k = arith.addi " + at + ", %lk : index\n";
  if (!nvfp4) {
    text += "        " + out + "k8 = arith.addi " + out + "k, %c8 : index\n";
    text += "        " + out + "0 = vector.load %" + w + "[%e, %brow, " + out +
            "k] {alignment = 16} : " + p.type + ", vector<8xbf16>\n";
    text += "        " + out + "1 = vector.load %" + w + "[%e, %brow, " + out +
            "k8] {alignment = 16} : " + p.type + ", vector<8xbf16>\n";
    return text;
  }
  text += "        " + out + "byte = arith.divui " + out + "k, %c2 : index\n";
  text += "        " + out + "blk = arith.divui " + out + "k, %c16 : index\n";
  text += "        " + out + "0 = vector.load %" + w + "[%e, %brow, " + out +
          "byte] {alignment = 8} : " + p.type + ", vector<8xi8>\n";
  text += "        " + out + "1 = memref.load %" + w + "_s[%e, %brow, " + out +
          "blk] : " + p.scalesType + "\n";
  return text;
}

std::string stagedTypes(bool nvfp4) {
  return nvfp4 ? "vector<8xi8>, i8" : "vector<8xbf16>, vector<8xbf16>";
}

// NVFP4 staging: the 16 E2M1 codes times their E4M3 scale, in bf16 (exact),
// from `P`w0 (codes) and `P`w1 (scale) into `P`b0, `P`b1. The codes and the
// scale are placed into f16 bits (as in WarpSnippets.h); 2^22 undoes the
// placement.
std::string nvfp4Finish(const std::string &P) {
  return fillTemplate(R"(
      @@P@@c16 = arith.extui @@P@@w0 : vector<8xi8> to vector<8xi16>
      @@P@@lo = arith.andi @@P@@c16, %nib_mask : vector<8xi16>
      @@P@@hi = arith.shrui @@P@@c16, %nib_shift : vector<8xi16>
      @@P@@all = vector.shuffle @@P@@lo, @@P@@hi [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15] : vector<8xi16>, vector<8xi16>
      @@P@@sgn = arith.andi @@P@@all, %code_sign : vector<16xi16>
      @@P@@sgns = arith.shli @@P@@sgn, %code_sign_shift : vector<16xi16>
      @@P@@mag = arith.andi @@P@@all, %code_mag : vector<16xi16>
      @@P@@mags = arith.shli @@P@@mag, %code_mag_shift : vector<16xi16>
      @@P@@bits = arith.ori @@P@@sgns, @@P@@mags : vector<16xi16>
      @@P@@half = arith.bitcast @@P@@bits : vector<16xi16> to vector<16xf16>
      @@P@@vals = arith.extf @@P@@half : vector<16xf16> to vector<16xf32>
      @@P@@s16 = arith.extui @@P@@w1 : i8 to i16
      @@P@@ssg = arith.andi @@P@@s16, %scale_sign : i16
      @@P@@ssgs = arith.shli @@P@@ssg, %scale_sign_shift : i16
      @@P@@smg = arith.andi @@P@@s16, %scale_mag : i16
      @@P@@smgs = arith.shli @@P@@smg, %scale_mag_shift : i16
      @@P@@sbits = arith.ori @@P@@ssgs, @@P@@smgs : i16
      @@P@@sh = arith.bitcast @@P@@sbits : i16 to f16
      @@P@@sf = arith.extf @@P@@sh : f16 to f32
      @@P@@sfold = arith.mulf @@P@@sf, %fold : f32
      @@P@@sv = vector.broadcast @@P@@sfold : f32 to vector<16xf32>
      @@P@@wv = arith.mulf @@P@@vals, @@P@@sv : vector<16xf32>
      @@P@@wb = arith.truncf @@P@@wv : vector<16xf32> to vector<16xbf16>
      @@P@@b0 = vector.shuffle @@P@@wb, @@P@@wb [0, 1, 2, 3, 4, 5, 6, 7] : vector<16xbf16>, vector<16xbf16>
      @@P@@b1 = vector.shuffle @@P@@wb, @@P@@wb [8, 9, 10, 11, 12, 13, 14, 15] : vector<16xbf16>, vector<16xbf16>
)",
                      {{"P", P}});
}

constexpr const char *kNvfp4Constants = R"(
    %nib_mask = arith.constant dense<15> : vector<8xi16>
    %nib_shift = arith.constant dense<4> : vector<8xi16>
    %code_sign = arith.constant dense<8> : vector<16xi16>
    %code_sign_shift = arith.constant dense<12> : vector<16xi16>
    %code_mag = arith.constant dense<7> : vector<16xi16>
    %code_mag_shift = arith.constant dense<9> : vector<16xi16>
    %scale_sign = arith.constant 128 : i16
    %scale_sign_shift = arith.constant 8 : i16
    %scale_mag = arith.constant 127 : i16
    %scale_mag_shift = arith.constant 7 : i16
    %fold = arith.constant 4194304.0 : f32
)";

// Inside the live region (after kernels::expertTileItems): this thread's
// staging item (token %lt, slot %lj).
std::string stagingItem(const MmaExpertsShape &s) {
  return fillTemplate(R"(
    %lrow_in = arith.minui %lrow, %last_in : index
    %lpos = arith.addi %base, %lrow_in : index
    %litem_i = memref.load %items[%lpos] : memref<@@mi@@xi32>
    %litem = arith.index_cast %litem_i : i32 to index
    %lt = arith.divui %litem, %ck : index
    %lj = arith.remui %litem, %ck : index
)",
                      {{"mi", str(s.maxItems())}});
}

// The epilogue's row: for mma row `row` of the tile, whether it holds an
// item (`R`ok) and the item's token `R`t and slot `R`j.
std::string itemOfRow(const std::string &R, const std::string &row, const MmaExpertsShape &s) {
  return fillTemplate(R"(
    @@R@@ok = arith.cmpi ult, @@row@@, %rows_in : index
    @@R@@r = arith.minui @@row@@, %last_in : index
    @@R@@pos = arith.addi %base, @@R@@r : index
    @@R@@item_i = memref.load %items[@@R@@pos] : memref<@@mi@@xi32>
    @@R@@item = arith.index_cast @@R@@item_i : i32 to index
    @@R@@t = arith.divui @@R@@item, %ck : index
    @@R@@j = arith.remui @@R@@item, %ck : index
)",
                      {{"R", R}, {"row", row}, {"mi", str(s.maxItems())}});
}

// The epilogue's walk over the warp's 8 tile rows (mma row tile i, half 0
// for c0 c1 or 1 for c2 c3): each row that holds an item gets `body`'s text
// (given the row's prefix R, with R t and R j its token and slot, i and half)
// inside an scf.if.
std::string
forEachItemRow(const MmaExpertsShape &s,
               const std::function<std::string(const std::string &, int64_t, int64_t)> &body) {
  std::string text;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t half = 0; half < 2; ++half) {
      std::string R = "%r" + str(i) + "_" + str(half) + "_";
      text += itemOfRow(R, half ? "%ra8_" + str(i) : "%ra" + str(i), s) + "    scf.if " + R +
              "ok {\n" + body(R, i, half) + "    }\n";
    }
  return text;
}

std::string finishWeights(bool nvfp4, const std::string &P) {
  if (nvfp4)
    return nvfp4Finish(P);
  return ""; // bf16 loads land as `P`b0, `P`b1 already
}

} // namespace

bool mmaExpertsFit(const MmaExpertsShape &s) {
  return s.maxTokens > 1 && s.latent % kMmaTileN == 0 && s.intermediate % kGateUpCols == 0 &&
         s.latent % kMmaTileK == 0 && s.intermediate % kMmaTileK == 0 && kernels::expertListsFit(s);
}

kernels::Work mmaExpertListsWork(const MmaExpertsShape &s) { return kernels::expertListsWork(s); }
kernels::Work mmaExpertGateUpWork(const MmaExpertsShape &s) {
  return kernels::Work{s.maxTiles() * (s.intermediate / kGateUpCols) * kMmaThreads, 0, kMmaThreads};
}
kernels::Work mmaExpertDownWork(const MmaExpertsShape &s) {
  return kernels::Work{s.maxTiles() * (s.latent / kMmaTileN) * kMmaThreads, 0, kMmaThreads};
}

kernels::KernelSpec mmaExpertLists(const MmaExpertsShape &s) { return kernels::expertLists(s); }

kernels::KernelSpec mmaExpertGateUp(const MmaExpertsShape &s) {
  Projection gate = projection("gate", s, s.intermediate, s.latent);
  Projection up = projection("up", s, s.intermediate, s.latent);
  std::string zt = "memref<?x" + str(s.latent) + "xf32>";
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  MmaTileKernel kernel;
  kernel.name = "expert_gateup_mma_" + kernels::expertShapeSuffix(s);
  kernel.args = "%z: " + zt + ", " + kernels::expertListArgs(s) + ", " + gate.args + ", " +
                up.args + ", %h: " + ht;
  kernel.tiling = "kind = \"mma-expert-gateup\", tile = [128, 128, 32], block = 256 : i64";
  kernel.k = s.latent;
  kernel.setup = kernels::expertTileOfBlock(s, s.intermediate / kGateUpCols);
  // Tile row r: gate (r % 32 < 16) or up, column 64 nt + 16 (r / 32) + r % 16.
  kernel.rows = "\n    %ck = arith.constant " + str(s.k) + " : index" +
                kernels::expertTileItems(s) + stagingItem(s) + (s.nvfp4 ? kNvfp4Constants : "") +
                R"(
    %bw = arith.divui %lrow, %c32 : index
    %bin = arith.remui %lrow, %c32 : index
    %is_up = arith.cmpi uge, %bin, %c16 : index
    %bsub = arith.remui %bin, %c16 : index
    %bcol0 = arith.muli %nt, %c64 : index
    %bw16 = arith.muli %bw, %c16 : index
    %bcol = arith.addi %bcol0, %bw16 : index
    %brow = arith.addi %bcol, %bsub : index
)";
  bool nvfp4 = s.nvfp4;
  kernel.load = [=](const std::string &P, const std::string &at) {
    std::string types = stagedTypes(nvfp4);
    std::string text = mmaActivationLoad("%z", zt, "%lt", P, at);
    std::string staged = nvfp4 ? P + "w0, " + P + "w1" : P + "b0, " + P + "b1";
    text += "      " + staged + " = scf.if %is_up -> (" + types + ") {\n" +
            weightLoad("up", up, nvfp4, at, P + "u") + "        scf.yield " + P + "u0, " + P +
            "u1 : " + types + "\n      } else {\n" + weightLoad("gate", gate, nvfp4, at, P + "g") +
            "        scf.yield " + P + "g0, " + P + "g1 : " + types + "\n      }\n";
    return text;
  };
  kernel.finish = [=](const std::string &P) { return finishWeights(nvfp4, P); };
  // Warp wn's mma tiles j = 0, 1 are gate columns 64 nt + 16 wn + 8 j + 2 t
  // (and the next); tiles j + 2 are up for the same columns.
  std::string epilogue = gate.globalLoad + up.globalLoad +
                         "    %ecol0 = arith.muli %nt, %c64 : index\n"
                         "    %ewn = arith.muli %wn, %c16 : index\n"
                         "    %ecol1 = arith.addi %ecol0, %ewn : index\n"
                         "    %et2 = arith.muli %t, %c2 : index\n"
                         "    %ecol = arith.addi %ecol1, %et2 : index\n"
                         "    %ecol8 = arith.addi %ecol, %c8 : index\n"
                         "    %one_f = arith.constant 1.0 : f32\n";
  epilogue += forEachItemRow(s, [&](const std::string &R, int64_t i, int64_t half) {
    std::string text;
    for (int64_t j = 0; j < 2; ++j) {
      std::string hs;
      for (int64_t e = 0; e < 2; ++e) {
        std::string V = R + str(j) + "_" + str(e);
        std::string g = "%res#" + str(4 * i + j), u = "%res#" + str(4 * i + j + 2);
        std::string at = str(2 * half + e);
        text += "      " + V + "g0 = llvm.extractvalue " + g + "[" + at +
                "] : !llvm.struct<(f32, f32, f32, f32)>\n" + "      " + V +
                "u0 = llvm.extractvalue " + u + "[" + at +
                "] : !llvm.struct<(f32, f32, f32, f32)>\n";
        std::string gv = V + "g0", uv = V + "u0";
        if (s.nvfp4) {
          text += "      " + V + "g = arith.mulf " + V + "g0, %gate_glob : f32\n" + "      " + V +
                  "u = arith.mulf " + V + "u0, %up_glob : f32\n";
          gv = V + "g";
          uv = V + "u";
        }
        // h = silu(g) * u, as the reference computes it.
        text += "      " + V + "ng = arith.negf " + gv + " : f32\n" + "      " + V +
                "ex = math.exp " + V + "ng : f32\n" + "      " + V + "den = arith.addf %one_f, " +
                V + "ex : f32\n" + "      " + V + "sig = arith.divf " + gv + ", " + V +
                "den : f32\n" + "      " + V + "h = arith.mulf " + V + "sig, " + uv + " : f32\n";
        hs += (e ? ", " : "") + V + "h";
      }
      std::string H = R + str(j);
      text += "      " + H + "v = vector.from_elements " + hs + " : vector<2xf32>\n" +
              "      vector.store " + H + "v, %h[" + R + "t, " + R + "j, " +
              (j ? "%ecol8" : "%ecol") + "] {alignment = 8} : " + ht + ", vector<2xf32>\n";
    }
    return text;
  });
  kernel.epilogue = epilogue;
  return kernels::textKernel(kernel.name, "kiln.megamoe", mmaTileKernelText(kernel));
}

kernels::KernelSpec mmaExpertDown(const MmaExpertsShape &s) {
  Projection down = projection("down", s, s.latent, s.intermediate);
  std::string ht = "memref<?x" + str(s.k) + "x" + str(s.intermediate) + "xf32>";
  std::string yt = "memref<?x" + str(s.k) + "x" + str(s.latent) + "xf32>";
  MmaTileKernel kernel;
  kernel.name = "expert_down_mma_" + kernels::expertShapeSuffix(s);
  kernel.args =
      "%hin: " + ht + ", " + kernels::expertListArgs(s) + ", " + down.args + ", %y: " + yt;
  kernel.tiling = "kind = \"mma-expert-down\", tile = [128, 128, 32], block = 256 : i64";
  kernel.k = s.intermediate;
  kernel.setup = kernels::expertTileOfBlock(s, s.latent / kMmaTileN);
  kernel.rows = "\n    %ck = arith.constant " + str(s.k) + " : index" +
                kernels::expertTileItems(s) + stagingItem(s) + (s.nvfp4 ? kNvfp4Constants : "") +
                R"(
    %bcol0 = arith.muli %nt, %c128 : index
    %brow = arith.addi %bcol0, %lrow : index
)";
  bool nvfp4 = s.nvfp4;
  kernel.load = [=](const std::string &P, const std::string &at) {
    return mmaActivationLoad("%hin", ht, "%lt, %lj", P, at) +
           weightLoad("down", down, nvfp4, at, nvfp4 ? P + "w" : P + "b");
  };
  kernel.finish = [=](const std::string &P) { return finishWeights(nvfp4, P); };
  std::string epilogue = down.globalLoad + "    %ecol0 = arith.muli %nt, %c128 : index\n"
                                           "    %et2 = arith.muli %t, %c2 : index\n";
  for (int64_t j = 0; j < 4; ++j)
    epilogue += "    %ecol" + str(j + 1) + "_w = arith.addi %ecol0, %rb" + str(j) + "_w : index\n" +
                "    %ecol" + str(j + 1) + " = arith.addi %ecol" + str(j + 1) +
                "_w, %et2 : index\n";
  epilogue += forEachItemRow(s, [&](const std::string &R, int64_t i, int64_t half) {
    std::string text;
    for (int64_t j = 0; j < 4; ++j) {
      std::string V = R + str(j) + "_", res = "%res#" + str(4 * i + j), ys;
      for (int64_t e = 0; e < 2; ++e) {
        std::string X = V + str(e);
        text += "      " + X + "a = llvm.extractvalue " + res + "[" + str(2 * half + e) +
                "] : !llvm.struct<(f32, f32, f32, f32)>\n";
        if (s.nvfp4)
          text += "      " + X + " = arith.mulf " + X + "a, %down_glob : f32\n";
        ys += (e ? ", " : "") + X + (s.nvfp4 ? "" : "a");
      }
      text += "      " + V + "v = vector.from_elements " + ys + " : vector<2xf32>\n" +
              "      vector.store " + V + "v, %y[" + R + "t, " + R + "j, %ecol" + str(j + 1) +
              "] {alignment = 8} : " + yt + ", vector<2xf32>\n";
    }
    return text;
  });
  kernel.epilogue = epilogue;
  return kernels::textKernel(kernel.name, "kiln.megamoe", mmaTileKernelText(kernel));
}

} // namespace kiln::nvptx
