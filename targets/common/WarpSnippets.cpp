#include "targets/common/WarpSnippets.h"

#include "targets/common/KernelSpec.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>

namespace kiln::kernels::warp {
std::string warpIds() {
  return R"(
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %part_x = arith.index_cast %part : i64 to index
  %parts_x = arith.index_cast %parts : i64 to index
  %lane = arith.remui %part_x, %c32 : index
  %warp = arith.divui %part_x, %c32 : index
  %warps = arith.divui %parts_x, %c32 : index
)";
}

std::string warpSum(const std::string &in, const std::string &out, int64_t firstOffset,
                    int64_t width) {
  if (firstOffset >= width)
    return "    %" + out + "_zero = arith.constant 0.0 : f32\n    %" + out + " = arith.addf %" +
           in + ", %" + out + "_zero : f32\n";
  std::string text = "    %" + out + "_w = arith.constant 32 : i32\n";
  std::string value = "%" + in;
  for (int64_t offset = firstOffset; offset < width; offset *= 2) {
    std::string o = out + "_" + str(offset);
    std::string result = offset * 2 >= width ? "%" + out : "%" + o;
    text += "    %" + o + "_off = arith.constant " + str(offset) + " : i32\n";
    text += "    %" + o + "_x, %" + o + "_ok = gpu.shuffle xor " + value + ", %" + o + "_off, %" +
            out + "_w : f32\n";
    text += "    " + result + " = arith.addf " + value + ", %" + o + "_x : f32\n";
    value = result;
  }
  return text;
}

namespace {

// The body of one chunk for every row: loads of the vector at chunk offset
// `at` (elements for bf16, code bytes for NVFP4), then each row's update of
// its accumulator `acc[r]` into `next[r]`. `P` prefixes every name.
std::string bf16Chunk(const std::vector<WeightRow> &rows, const std::string &x,
                      const std::string &xType, const std::string &xIdx, const std::string &at,
                      const std::string &P, const std::string & /*C*/,
                      const std::vector<std::string> &acc, const std::vector<std::string> &next) {
  // Each distinct vector row and weight row is loaded once per chunk.
  std::map<std::string, std::string> xs, ws;
  std::string text;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string R = P + "r" + str(int64_t(r)) + "_";
    std::string idx = rows[r].xIdx.empty() ? xIdx : rows[r].xIdx;
    auto [xv, newX] = xs.emplace(idx, R + "xv");
    if (newX)
      text += "      " + xv->second + " = vector.load " + x + "[" + idx + ", " + at +
              "] {alignment = 32} : " + xType + ", vector<8xf32>\n";
    auto [wf, newW] = ws.emplace(rows[r].w + "[" + rows[r].rowIdx + "]", R + "wf");
    if (newW)
      text += fillTemplate(
          R"(
      @@R@@wb = vector.load @@w@@[@@ri@@, @@at@@] {alignment = 16} : @@wt@@, vector<8xbf16>
      @@R@@wf = arith.extf @@R@@wb : vector<8xbf16> to vector<8xf32>
)",
          {{"R", R}, {"w", rows[r].w}, {"ri", rows[r].rowIdx}, {"at", at}, {"wt", rows[r].type}});
    text += "      " + next[r] + " = vector.fma " + xv->second + ", " + wf->second + ", " + acc[r] +
            " : vector<8xf32>\n";
  }
  return text;
}

// NVFP4 decoding in registers: an E2M1 code s|e1 e0|m placed in an f16 as s
// at bit 15 and e1 e0 m at bits 11..9 is the code's value times 2^-14; an
// E4M3 byte placed as s at bit 15 and its other bits at 14..7 is its value
// times 2^-8. Both factors fold into one constant, 2^22, applied at the end.
std::string nvfp4Constants(const std::string &P) {
  std::string text = fillTemplate(R"(
    @@P@@c2 = arith.constant 2 : index
    @@P@@c8 = arith.constant 8 : index
    @@P@@lo_mask = arith.constant dense<458759> : vector<4xi32>
    @@P@@hi_mask = arith.constant dense<524296> : vector<4xi32>
    @@P@@sh9 = arith.constant dense<9> : vector<4xi32>
    @@P@@sh12 = arith.constant dense<12> : vector<4xi32>
    @@P@@s_sign = arith.constant dense<128> : vector<2xi16>
    @@P@@s_mag = arith.constant dense<127> : vector<2xi16>
    @@P@@s_sh8 = arith.constant dense<8> : vector<2xi16>
    @@P@@s_sh7 = arith.constant dense<7> : vector<2xi16>
    @@P@@g_sign = arith.constant dense<128> : vector<8xi16>
    @@P@@g_mag = arith.constant dense<127> : vector<8xi16>
    @@P@@g_sh8 = arith.constant dense<8> : vector<8xi16>
    @@P@@g_sh7 = arith.constant dense<7> : vector<8xi16>
    @@P@@fold = arith.constant 4194304.0 : f32
)",
                                  {{"P", P}});
  for (int i = 1; i < 4; ++i)
    text += "    " + P + "sh" + str(4 * i) + "n = arith.constant dense<" + str(4 * i) +
            "> : vector<4xi32>\n";
  return text;
}

// E4M3 block scales `R`sv (vector<`width`xi8>) as f32 `out`, times 2^8:
// the byte's sign at bit 15 of an f16 and its other bits at 14..7 (the
// constants `C``K`sign, mag, sh8, sh7, of the same width).
std::string e4m3Decode(const std::string &R, const std::string &C, int64_t width,
                       const std::string &K, const std::string &out) {
  return fillTemplate(R"(
      @@R@@s16 = arith.extui @@R@@sv : vector<@@W@@xi8> to vector<@@W@@xi16>
      @@R@@sg = arith.andi @@R@@s16, @@C@@@@K@@sign : vector<@@W@@xi16>
      @@R@@sgs = arith.shli @@R@@sg, @@C@@@@K@@sh8 : vector<@@W@@xi16>
      @@R@@sm = arith.andi @@R@@s16, @@C@@@@K@@mag : vector<@@W@@xi16>
      @@R@@sms = arith.shli @@R@@sm, @@C@@@@K@@sh7 : vector<@@W@@xi16>
      @@R@@sbits = arith.ori @@R@@sgs, @@R@@sms : vector<@@W@@xi16>
      @@R@@sh = arith.bitcast @@R@@sbits : vector<@@W@@xi16> to vector<@@W@@xf16>
      @@out@@ = arith.extf @@R@@sh : vector<@@W@@xf16> to vector<@@W@@xf32>
)",
                      {{"R", R}, {"C", C}, {"K", K}, {"W", str(width)}, {"out", out}});
}

// Grouped lanes: a row's 8 two-byte pieces of codes (group m at byte at +
// 64 m) as `R`wi (vector<4xi32>, word w = groups 2w and 2w + 1, as a
// Contiguous lane's 16 bytes), and the groups' 8 E4M3 scales (at at / 8 +
// 8 m) as f32 `R`svec, times 2^8 like the Contiguous one's.
std::string groupedWeightLoads(const WeightRow &row, const std::string &at, const std::string &P,
                               const std::string &C, const std::string &R) {
  std::string text, pieces, scales;
  for (int m = 0; m < 8; ++m) {
    std::string M = str(m);
    std::string codeAt = m ? P + "ci" + M : at, scaleAt = m ? P + "si" + M : P + "sb";
    text += "      " + R + "wp" + M + " = vector.load " + row.w + "[" + row.rowIdx + ", " + codeAt +
            "] {alignment = 2} : " + row.type + ", vector<2xi8>\n";
    text += "      " + R + "sp" + M + " = memref.load " + row.scales + "[" + row.rowIdx + ", " +
            scaleAt + "] : " + row.scalesType + "\n";
    scales += std::string(m ? ", " : "") + R + "sp" + M;
  }
  // Pairs of pieces, then the pairs' halves: 16 bytes in group order.
  for (int w = 0; w < 4; ++w)
    text += "      " + R + "wq" + str(w) + " = vector.shuffle " + R + "wp" + str(2 * w) + ", " + R +
            "wp" + str(2 * w + 1) + " [0, 1, 2, 3] : vector<2xi8>, vector<2xi8>\n";
  text += "      " + R + "wh0 = vector.shuffle " + R + "wq0, " + R +
          "wq1 [0, 1, 2, 3, 4, 5, 6, 7] : vector<4xi8>, vector<4xi8>\n";
  text += "      " + R + "wh1 = vector.shuffle " + R + "wq2, " + R +
          "wq3 [0, 1, 2, 3, 4, 5, 6, 7] : vector<4xi8>, vector<4xi8>\n";
  text +=
      "      " + R + "wv = vector.shuffle " + R + "wh0, " + R +
      "wh1 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xi8>, vector<8xi8>\n";
  text += fillTemplate(R"(
      @@R@@wi = vector.bitcast @@R@@wv : vector<16xi8> to vector<4xi32>
      @@R@@sv = vector.from_elements @@scales@@ : vector<8xi8>
)",
                       {{"R", R}, {"scales", scales}});
  return text + e4m3Decode(R, C, 8, "g_", R + "svec");
}

std::string nvfp4Chunk(Nvfp4Lanes lanes, const std::vector<WeightRow> &rows, const std::string &x,
                       const std::string &xType, const std::string &xIdx, const std::string &at,
                       const std::string &P, const std::string &C,
                       const std::vector<std::string> &acc, const std::vector<std::string> &next) {
  const bool grouped = lanes == Nvfp4Lanes::Grouped;
  // `at`: the lane's first code byte; its vector elements start at 2 at, its
  // first scale at at / 8. Group m (Grouped) or word m (Contiguous) is
  // `groupStep` elements further.
  const int64_t groupStep = grouped ? 128 : 4;
  std::string text = "      " + P + "xb = arith.muli " + at + ", " + C + "c2 : index\n" + "      " +
                     P + "sb = arith.divui " + at + ", " + C + "c8 : index\n";
  for (int m = 1; m < 8; ++m) {
    text += "      " + P + "xo" + str(m) + " = arith.constant " + str(groupStep * m) +
            " : index\n" + "      " + P + "xi" + str(m) + " = arith.addi " + P + "xb, " + P + "xo" +
            str(m) + " : index\n";
    if (grouped)
      text += "      " + P + "co" + str(m) + " = arith.constant " + str(64 * m) + " : index\n" +
              "      " + P + "ci" + str(m) + " = arith.addi " + at + ", " + P + "co" + str(m) +
              " : index\n" + "      " + P + "so" + str(m) + " = arith.constant " + str(8 * m) +
              " : index\n" + "      " + P + "si" + str(m) + " = arith.addi " + P + "sb, " + P +
              "so" + str(m) + " : index\n";
  }
  // The lane's 32 elements of vector row `idx`, as `V`X0 .. `V`X3: x_m holds
  // the 4 elements of word (or group) m, X_i[m] = its element i, the order
  // a shifted, bitcast word of codes gives.
  auto loadVector = [&](const std::string &idx, const std::string &V) {
    std::string load;
    for (int m = 0; m < 8; ++m)
      load += "      " + V + "x" + str(m) + " = vector.load " + x + "[" + idx + ", " +
              (m ? P + "xi" + str(m) : P + "xb") + "] {alignment = 16} : " + xType +
              ", vector<4xf32>\n";
    for (int i = 0; i < 4; ++i) {
      std::string elems;
      for (int m = 0; m < 8; ++m) {
        std::string e = V + "e" + str(m) + "_" + str(i);
        load += "      " + e + " = vector.extract " + V + "x" + str(m) + "[" + str(i) +
                "] : f32 from vector<4xf32>\n";
        elems += (m ? ", " : "") + e;
      }
      load +=
          "      " + V + "X" + str(i) + " = vector.from_elements " + elems + " : vector<8xf32>\n";
    }
    return load;
  };
  // Each distinct vector row and weight row is loaded (and decoded) once per
  // chunk; the shared vector row first.
  std::map<std::string, std::string> xs = {{xIdx, P}}, ws;
  text += loadVector(xIdx, P);
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string R = P + "r" + str(int64_t(r)) + "_";
    std::string idx = rows[r].xIdx.empty() ? xIdx : rows[r].xIdx;
    auto [xv, newX] = xs.emplace(idx, P + "v" + str(int64_t(xs.size())) + "_");
    if (newX)
      text += loadVector(idx, xv->second);
    auto [wd, newW] = ws.emplace(rows[r].w + "[" + rows[r].rowIdx + "]", R);
    const std::string &W = wd->second;
    if (newW) {
      if (grouped)
        text += groupedWeightLoads(rows[r], at, P, C, R);
      else
        text += fillTemplate(R"(
      @@R@@wv = vector.load @@w@@[@@ri@@, @@at@@] {alignment = 16} : @@wt@@, vector<16xi8>
      @@R@@wi = vector.bitcast @@R@@wv : vector<16xi8> to vector<4xi32>
      @@R@@sv = vector.load @@s@@[@@ri@@, @@P@@sb] {alignment = 2} : @@st@@, vector<2xi8>
@@decode@@
      @@R@@s0 = vector.extract @@R@@sf[0] : f32 from vector<2xf32>
      @@R@@s1 = vector.extract @@R@@sf[1] : f32 from vector<2xf32>
      @@R@@svec = vector.from_elements @@R@@s0, @@R@@s0, @@R@@s0, @@R@@s0, @@R@@s1, @@R@@s1, @@R@@s1, @@R@@s1 : vector<8xf32>
)",
                             {{"R", R},
                              {"P", P},
                              {"w", rows[r].w},
                              {"ri", rows[r].rowIdx},
                              {"at", at},
                              {"wt", rows[r].type},
                              {"s", rows[r].scales},
                              {"st", rows[r].scalesType},
                              {"decode", e4m3Decode(R, C, 2, "s_", R + "sf")}});
      for (int i = 0; i < 4; ++i) {
        std::string I = str(i), src = R + "wi";
        if (i) {
          text += "      " + R + "t" + I + " = arith.shrui " + R + "wi, " + C + "sh" + str(4 * i) +
                  "n : vector<4xi32>\n";
          src = R + "t" + I;
        }
        text += fillTemplate(R"(
      @@R@@lo@@I@@ = arith.andi @@src@@, @@C@@lo_mask : vector<4xi32>
      @@R@@los@@I@@ = arith.shli @@R@@lo@@I@@, @@C@@sh9 : vector<4xi32>
      @@R@@hi@@I@@ = arith.andi @@src@@, @@C@@hi_mask : vector<4xi32>
      @@R@@his@@I@@ = arith.shli @@R@@hi@@I@@, @@C@@sh12 : vector<4xi32>
      @@R@@p@@I@@ = arith.ori @@R@@los@@I@@, @@R@@his@@I@@ : vector<4xi32>
      @@R@@h@@I@@ = vector.bitcast @@R@@p@@I@@ : vector<4xi32> to vector<8xf16>
      @@R@@d@@I@@ = arith.extf @@R@@h@@I@@ : vector<8xf16> to vector<8xf32>
)",
                             {{"R", R}, {"C", C}, {"I", I}, {"src", src}});
      }
    }
    std::string chain = C + "z";
    for (int i = 0; i < 4; ++i) {
      std::string q = R + "q" + str(i);
      text += "      " + q + " = vector.fma " + W + "d" + str(i) + ", " + xv->second + "X" +
              str(i) + ", " + chain + " : vector<8xf32>\n";
      chain = q;
    }
    text += "      " + next[r] + " = vector.fma " + chain + ", " + W + "svec, " + acc[r] +
            " : vector<8xf32>\n";
  }
  return text;
}

// How many chunks one loop iteration covers: enough loads in flight to hide
// memory latency without running out of registers.
int64_t chunksPerStep(int64_t chunks, size_t rows, bool nvfp4) {
  int64_t budget = nvfp4 ? 1 : std::max<int64_t>(1, 8 / int64_t(rows));
  for (int64_t u = budget; u > 1; u /= 2)
    if (chunks % u == 0)
      return u;
  return 1;
}

} // namespace

std::string rowsDot(const std::vector<WeightRow> &rows, bool nvfp4, const std::string &x,
                    const std::string &xType, const std::string &xIdx, int64_t k,
                    const std::vector<std::string> &outs, const std::string &offset,
                    Nvfp4Lanes lanes) {
  std::string P = "%" + outs.front() + "_";
  // A chunk: 256 elements for bf16 (16 bytes a lane), 512 code bytes
  // (1024 elements) for NVFP4; Grouped lanes need whole chunks.
  // laneStep: where lane l's part starts, l laneStep.
  int64_t extent = nvfp4 ? k / 2 : k, chunk = nvfp4 ? 512 : 256;
  if (extent % chunk != 0)
    lanes = Nvfp4Lanes::Contiguous;
  int64_t laneStep = !nvfp4 ? 8 : lanes == Nvfp4Lanes::Grouped ? 2 : 16;
  std::string text = "    " + P + "z = arith.constant dense<0.0> : vector<8xf32>\n" + "    " + P +
                     "ls = arith.constant " + str(laneStep) + " : index\n" + "    " + P +
                     (offset.empty() ? "lo" : "l0") + " = arith.muli %lane, " + P + "ls : index\n";
  if (!offset.empty()) // columns of the codes for NVFP4: bytes
    text += nvfp4 ? "    " + P + "ob = arith.divui " + offset + ", " + P + "two : index\n" +
                        "    " + P + "lo = arith.addi " + P + "l0, " + P + "ob : index\n"
                  : "    " + P + "lo = arith.addi " + P + "l0, " + offset + " : index\n";
  if (!offset.empty() && nvfp4)
    text = "    " + P + "two = arith.constant 2 : index\n" + text;
  if (nvfp4)
    text += nvfp4Constants(P);
  auto chunkBody = [&](const std::vector<WeightRow> &chunkRows, const std::string &vec,
                       const std::string &vecType, const std::string &vecIdx, const std::string &at,
                       const std::string &names, const std::string &constants,
                       const std::vector<std::string> &from, const std::vector<std::string> &to) {
    return nvfp4
               ? nvfp4Chunk(lanes, chunkRows, vec, vecType, vecIdx, at, names, constants, from, to)
               : bf16Chunk(chunkRows, vec, vecType, vecIdx, at, names, constants, from, to);
  };
  std::vector<std::string> acc, yields;
  std::string args, types;
  for (size_t r = 0; r < rows.size(); ++r) {
    acc.push_back(P + "a" + str(int64_t(r)));
    args += std::string(r ? ", " : "") + acc.back() + " = " + P + "z";
    types += std::string(r ? ", " : "") + "vector<8xf32>";
  }
  std::string results = P + "acc";
  if (extent % chunk != 0) {
    // Lanes past the row's end skip the last chunk.
    std::vector<std::string> next;
    for (size_t r = 0; r < rows.size(); ++r)
      next.push_back(P + "n" + str(int64_t(r)) + "_0");
    if (!offset.empty()) { // a generator bug, like a template's missing value
      std::fprintf(stderr, "kiln: a warp dot over a column range needs whole chunks\n");
      std::abort();
    }
    text += "    " + P + "extent = arith.constant " + str(extent) + " : index\n" + "    " + P +
            "step = arith.constant " + str(chunk) + " : index\n" + "    " + results + ":" +
            str(int64_t(rows.size())) + " = scf.for " + P + "at = " + P + "lo to " + P +
            "extent step " + P + "step iter_args(" + args + ") -> (" + types + ") {\n" +
            chunkBody(rows, x, xType, xIdx, P + "at", P + "u0_", P, acc, next);
    yields = next;
  } else {
    int64_t chunks = extent / chunk, u = chunksPerStep(chunks, rows.size(), nvfp4);
    text += "    " + P + "iters = arith.constant " + str(chunks / u) + " : index\n" + "    " + P +
            "stride = arith.constant " + str(chunk * u) + " : index\n" + "    " + results + ":" +
            str(int64_t(rows.size())) + " = scf.for " + P + "i = %c0 to " + P +
            "iters step %c1 iter_args(" + args + ") -> (" + types + ") {\n" + "      " + P +
            "b0 = arith.muli " + P + "i, " + P + "stride : index\n" + "      " + P +
            "b = arith.addi " + P + "b0, " + P + "lo : index\n";
    std::vector<std::string> current = acc;
    for (int64_t i = 0; i < u; ++i) {
      std::string at = P + "b";
      if (i) {
        at = P + "k" + str(i);
        text += "      " + P + "o" + str(i) + " = arith.constant " + str(chunk * i) + " : index\n" +
                "      " + at + " = arith.addi " + P + "b, " + P + "o" + str(i) + " : index\n";
      }
      std::vector<std::string> next;
      for (size_t r = 0; r < rows.size(); ++r)
        next.push_back(P + "n" + str(int64_t(r)) + "_" + str(i));
      text += chunkBody(rows, x, xType, xIdx, at, P + "u" + str(i) + "_", P, current, next);
      current = next;
    }
    yields = current;
  }
  std::string yieldList;
  for (size_t r = 0; r < rows.size(); ++r)
    yieldList += std::string(r ? ", " : "") + yields[r];
  text += "      scf.yield " + yieldList + " : " + types + "\n    }\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    std::string sum = P + "sum" + str(int64_t(r));
    text += "    " + sum + " = vector.reduction <add>, " + results + "#" + str(int64_t(r)) +
            " : vector<8xf32> into f32\n";
    if (nvfp4)
      text += "    " + P + "g" + str(int64_t(r)) + " = arith.mulf " + rows[r].global + ", " + P +
              "fold : f32\n" + "    %" + outs[r] + " = arith.mulf " + sum + ", " + P + "g" +
              str(int64_t(r)) + " : f32\n";
    else
      text += "    %" + outs[r] + " = arith.addf " + sum + ", " + P + "zf : f32\n";
  }
  if (!nvfp4)
    text = "    " + P + "zf = arith.constant 0.0 : f32\n" + text;
  return text;
}

ExpertProjection expertProjection(const std::string &w, int64_t experts, int64_t out, int64_t in,
                                  bool nvfp4, const std::vector<std::string> &rowNames) {
  std::string E = str(experts), O = str(out);
  ExpertProjection p;
  if (!nvfp4) {
    std::string type = "memref<" + E + "x" + O + "x" + str(in) + "xbf16>";
    p.args = "%" + w + ": " + type;
    for (const std::string &o : rowNames)
      p.rows.push_back({"%" + w, type, "%e, " + o, "", "", ""});
    return p;
  }
  std::string type = "memref<" + E + "x" + O + "x" + str(in / 2) + "xi8>";
  std::string scales = "memref<" + E + "x" + O + "x" + str(in / 16) + "xi8>";
  std::string global = "memref<" + E + "xf32>";
  p.args = "%" + w + ": " + type + ", %" + w + "_s: " + scales + ", %" + w + "_g: " + global;
  p.globalLoad = "    %" + w + "_glob = memref.load %" + w + "_g[%e] : " + global + "\n";
  for (const std::string &o : rowNames)
    p.rows.push_back({"%" + w, type, "%e, " + o, "%" + w + "_s", scales, "%" + w + "_glob"});
  return p;
}

std::string swiGluStore(const std::string &h, const std::string &hType) {
  std::string text;
  for (const char *r : {"0", "1"})
    text += fillTemplate(R"(
      %ng@@r@@ = arith.negf %g@@r@@ : f32
      %ex@@r@@ = math.exp %ng@@r@@ : f32
      %den@@r@@ = arith.addf %one_f, %ex@@r@@ : f32
      %sig@@r@@ = arith.divf %g@@r@@, %den@@r@@ : f32
      %h@@r@@ = arith.mulf %sig@@r@@, %u@@r@@ : f32
      memref.store %h@@r@@, @@h@@[%t, %j, %o@@r@@] : @@ht@@
)",
                         {{"r", r}, {"h", h}, {"ht", hType}});
  return text;
}

} // namespace kiln::kernels::warp
