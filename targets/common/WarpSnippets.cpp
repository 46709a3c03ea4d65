#include "targets/common/WarpSnippets.h"

#include "targets/common/KernelSpec.h"

namespace kiln::kernels::warp {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

// `count` independent accumulators hide load latency better than one: the
// unroll a row of `chunks` slices gets.
int64_t unrollFor(int64_t chunks) {
  for (int64_t u : {4, 2})
    if (chunks % u == 0)
      return u;
  return 1;
}

} // namespace

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

std::string bf16RowDot(const std::string &w, const std::string &type, const std::string &rowIdx,
                       const std::string &x, const std::string &xType, const std::string &xIdx,
                       int64_t k, const std::string &out) {
  // Lane l covers elements [256 c + 8 l, +8) of the row: one 16-byte load of
  // weights per lane, 512 contiguous bytes per warp.
  std::string P = "%" + out + "_";
  std::string text = "    " + P + "z = arith.constant dense<0.0> : vector<8xf32>\n" +
                     "    " + P + "c8 = arith.constant 8 : index\n" +
                     "    " + P + "l8 = arith.muli %lane, " + P + "c8 : index\n";
  auto body = [&](const std::string &kk, const std::string &acc, const std::string &next) {
    return fillTemplate(R"(
      @@n@@_xv = vector.load @@x@@[@@xi@@, @@kk@@] {alignment = 32} : @@xt@@, vector<8xf32>
      @@n@@_wb = vector.load @@w@@[@@ri@@, @@kk@@] {alignment = 16} : @@wt@@, vector<8xbf16>
      @@n@@_wf = arith.extf @@n@@_wb : vector<8xbf16> to vector<8xf32>
      @@n@@ = vector.fma @@n@@_xv, @@n@@_wf, @@acc@@ : vector<8xf32>
)",
                        {{"n", next}, {"x", x}, {"xi", xIdx}, {"kk", kk}, {"xt", xType},
                         {"w", w}, {"ri", rowIdx}, {"wt", type}, {"acc", acc}});
  };
  if (k % 256 != 0) {
    text += "    " + P + "k = arith.constant " + str(k) + " : index\n" + "    " + P +
            "s256 = arith.constant 256 : index\n" + "    " + P + "acc = scf.for " + P +
            "kk = " + P + "l8 to " + P + "k step " + P + "s256 iter_args(" + P + "a = " + P +
            "z) -> (vector<8xf32>) {\n" + body(P + "kk", P + "a", P + "n") + "      scf.yield " +
            P + "n : vector<8xf32>\n    }\n";
    return text + "    %" + out + " = vector.reduction <add>, " + P +
           "acc : vector<8xf32> into f32\n";
  }
  int64_t chunks = k / 256, u = unrollFor(chunks);
  std::string args, types, yields;
  for (int64_t i = 0; i < u; ++i) {
    args += std::string(i ? ", " : "") + P + "a" + str(i) + " = " + P + "z";
    types += std::string(i ? ", " : "") + "vector<8xf32>";
    yields += std::string(i ? ", " : "") + P + "n" + str(i);
  }
  text += "    " + P + "iters = arith.constant " + str(chunks / u) + " : index\n" + "    " + P +
          "stride = arith.constant " + str(256 * u) + " : index\n" + "    " + P + "acc:" + str(u) +
          " = scf.for " + P + "i = %c0 to " + P + "iters step %c1 iter_args(" + args + ") -> (" +
          types + ") {\n" + "      " + P + "b0 = arith.muli " + P + "i, " + P + "stride : index\n" +
          "      " + P + "b = arith.addi " + P + "b0, " + P + "l8 : index\n";
  for (int64_t i = 0; i < u; ++i) {
    std::string kk = P + "b";
    if (i) {
      kk = P + "k" + str(i);
      text += "      " + P + "o" + str(i) + " = arith.constant " + str(256 * i) + " : index\n" +
              "      " + kk + " = arith.addi " + P + "b, " + P + "o" + str(i) + " : index\n";
    }
    text += body(kk, P + "a" + str(i), P + "n" + str(i));
  }
  text += "      scf.yield " + yields + " : " + types + "\n    }\n";
  std::string sum = P + "acc#0";
  for (int64_t i = 1; i < u; ++i) {
    text += "    " + P + "s" + str(i) + " = arith.addf " + sum + ", " + P + "acc#" + str(i) +
            " : vector<8xf32>\n";
    sum = P + "s" + str(i);
  }
  return text + "    %" + out + " = vector.reduction <add>, " + sum + " : vector<8xf32> into f32\n";
}

std::string nvfp4RowDot(const std::string &w, const std::string &type, const std::string &scales,
                        const std::string &scalesType, const std::string &rowIdx,
                        const std::string &global, const std::string &x, const std::string &xType,
                        const std::string &xIdx, int64_t k, const std::string &out) {
  // Lane l covers bytes [512 c + 16 l, +16) of the packed row: 32 elements in
  // two scale groups. Decoding in registers: an E2M1 code s|e1 e0|m placed in
  // an f16 as s at bit 15 and e1 e0 m at bits 11..9 is the code's value times
  // 2^-14; an E4M3 byte placed as s at bit 15 and its other bits at 14..7 is
  // its value times 2^-8. Both factors fold into one constant, 2^22.
  std::string P = "%" + out + "_";
  int64_t rowBytes = k / 2;
  std::string text = fillTemplate(R"(
    @@P@@z = arith.constant dense<0.0> : vector<8xf32>
    @@P@@c2 = arith.constant 2 : index
    @@P@@c8 = arith.constant 8 : index
    @@P@@c16 = arith.constant 16 : index
    @@P@@l16 = arith.muli %lane, @@P@@c16 : index
    @@P@@lo_mask = arith.constant dense<458759> : vector<4xi32>
    @@P@@hi_mask = arith.constant dense<524296> : vector<4xi32>
    @@P@@sh9 = arith.constant dense<9> : vector<4xi32>
    @@P@@sh12 = arith.constant dense<12> : vector<4xi32>
    @@P@@s_sign = arith.constant dense<128> : vector<2xi16>
    @@P@@s_mag = arith.constant dense<127> : vector<2xi16>
    @@P@@s_sh8 = arith.constant dense<8> : vector<2xi16>
    @@P@@s_sh7 = arith.constant dense<7> : vector<2xi16>
    @@P@@fold = arith.constant 4194304.0 : f32
)",
                                  {{"P", P}});
  for (int i = 1; i < 4; ++i)
    text += "    " + P + "sh" + str(4 * i) + "n = arith.constant dense<" + str(4 * i) +
            "> : vector<4xi32>\n";
  std::string loop;
  if (rowBytes % 512 == 0) {
    text += "    " + P + "iters = arith.constant " + str(rowBytes / 512) + " : index\n" + "    " +
            P + "s512 = arith.constant 512 : index\n";
    loop = "    " + P + "acc = scf.for " + P + "i = %c0 to " + P + "iters step %c1 iter_args(" + P +
           "a = " + P + "z) -> (vector<8xf32>) {\n" + "      " + P + "b0 = arith.muli " + P +
           "i, " + P + "s512 : index\n" + "      " + P + "b = arith.addi " + P + "b0, " + P +
           "l16 : index\n";
  } else {
    text += "    " + P + "bytes = arith.constant " + str(rowBytes) + " : index\n" + "    " + P +
            "s512 = arith.constant 512 : index\n";
    loop = "    " + P + "acc = scf.for " + P + "b = " + P + "l16 to " + P + "bytes step " + P +
           "s512 iter_args(" + P + "a = " + P + "z) -> (vector<8xf32>) {\n";
  }
  text += loop;
  text += fillTemplate(R"(
      @@P@@wv = vector.load @@w@@[@@ri@@, @@P@@b] {alignment = 16} : @@wt@@, vector<16xi8>
      @@P@@wi = vector.bitcast @@P@@wv : vector<16xi8> to vector<4xi32>
      @@P@@sb = arith.divui @@P@@b, @@P@@c8 : index
      @@P@@sv = vector.load @@s@@[@@ri@@, @@P@@sb] {alignment = 2} : @@st@@, vector<2xi8>
      @@P@@s16 = arith.extui @@P@@sv : vector<2xi8> to vector<2xi16>
      @@P@@sg = arith.andi @@P@@s16, @@P@@s_sign : vector<2xi16>
      @@P@@sgs = arith.shli @@P@@sg, @@P@@s_sh8 : vector<2xi16>
      @@P@@sm = arith.andi @@P@@s16, @@P@@s_mag : vector<2xi16>
      @@P@@sms = arith.shli @@P@@sm, @@P@@s_sh7 : vector<2xi16>
      @@P@@sbits = arith.ori @@P@@sgs, @@P@@sms : vector<2xi16>
      @@P@@sh = arith.bitcast @@P@@sbits : vector<2xi16> to vector<2xf16>
      @@P@@sf = arith.extf @@P@@sh : vector<2xf16> to vector<2xf32>
      @@P@@s0 = vector.extract @@P@@sf[0] : f32 from vector<2xf32>
      @@P@@s1 = vector.extract @@P@@sf[1] : f32 from vector<2xf32>
      @@P@@svec = vector.from_elements @@P@@s0, @@P@@s0, @@P@@s0, @@P@@s0, @@P@@s1, @@P@@s1, @@P@@s1, @@P@@s1 : vector<8xf32>
      @@P@@xb = arith.muli @@P@@b, @@P@@c2 : index
)",
                       {{"P", P}, {"w", w}, {"ri", rowIdx}, {"wt", type}, {"s", scales},
                        {"st", scalesType}});
  // x_m holds elements 4m .. 4m+3 of the lane's 32.
  for (int m = 0; m < 8; ++m) {
    std::string xm = P + "x" + str(m);
    std::string at = P + "xb";
    if (m) {
      text += "      " + P + "xo" + str(m) + " = arith.constant " + str(4 * m) + " : index\n" +
              "      " + P + "xi" + str(m) + " = arith.addi " + P + "xb, " + P + "xo" + str(m) +
              " : index\n";
      at = P + "xi" + str(m);
    }
    text += "      " + xm + " = vector.load " + x + "[" + xIdx + ", " + at +
            "] {alignment = 16} : " + xType + ", vector<4xf32>\n";
  }
  // Shift i brings nibble i of every 32-bit half into place; bitcast to
  // vector<8xf16>, element m of the result is the lane's element i + 4m.
  std::string acc = P + "z";
  for (int i = 0; i < 4; ++i) {
    std::string I = str(i), src = P + "wi";
    if (i) {
      text += "      " + P + "t" + I + " = arith.shrui " + P + "wi, " + P + "sh" + str(4 * i) +
              "n : vector<4xi32>\n";
      src = P + "t" + I;
    }
    text += fillTemplate(R"(
      @@P@@lo@@I@@ = arith.andi @@src@@, @@P@@lo_mask : vector<4xi32>
      @@P@@los@@I@@ = arith.shli @@P@@lo@@I@@, @@P@@sh9 : vector<4xi32>
      @@P@@hi@@I@@ = arith.andi @@src@@, @@P@@hi_mask : vector<4xi32>
      @@P@@his@@I@@ = arith.shli @@P@@hi@@I@@, @@P@@sh12 : vector<4xi32>
      @@P@@p@@I@@ = arith.ori @@P@@los@@I@@, @@P@@his@@I@@ : vector<4xi32>
      @@P@@h@@I@@ = vector.bitcast @@P@@p@@I@@ : vector<4xi32> to vector<8xf16>
      @@P@@d@@I@@ = arith.extf @@P@@h@@I@@ : vector<8xf16> to vector<8xf32>
)",
                         {{"P", P}, {"I", I}, {"src", src}});
    std::string elems;
    for (int m = 0; m < 8; ++m) {
      std::string e = P + "e" + str(m) + "_" + I;
      text += "      " + e + " = vector.extract " + P + "x" + str(m) + "[" + I +
              "] : f32 from vector<4xf32>\n";
      elems += (m ? ", " : "") + e;
    }
    text += "      " + P + "X" + I + " = vector.from_elements " + elems + " : vector<8xf32>\n";
    text += "      " + P + "q" + I + " = vector.fma " + P + "d" + I + ", " + P + "X" + I + ", " +
            acc + " : vector<8xf32>\n";
    acc = P + "q" + I;
  }
  text += "      " + P + "n = vector.fma " + acc + ", " + P + "svec, " + P + "a : vector<8xf32>\n" +
          "      scf.yield " + P + "n : vector<8xf32>\n    }\n";
  text += "    " + P + "sum = vector.reduction <add>, " + P + "acc : vector<8xf32> into f32\n" +
          "    " + P + "g = arith.mulf " + global + ", " + P + "fold : f32\n" + "    %" + out +
          " = arith.mulf " + P + "sum, " + P + "g : f32\n";
  return text;
}

} // namespace kiln::kernels::warp
