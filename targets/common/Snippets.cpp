#include "targets/common/Generators.h"

#include <cstdio>

namespace kiln::kernels {

std::string partRange(const std::string &n, const std::string &p) {
  return fillTemplate(R"(
    %@@p@@part = arith.index_cast %part : i64 to index
    %@@p@@parts = arith.index_cast %parts : i64 to index
    %@@p@@one = arith.constant 1 : index
    %@@p@@sum = arith.addi @@n@@, %@@p@@parts : index
    %@@p@@sum1 = arith.subi %@@p@@sum, %@@p@@one : index
    %@@p@@chunk = arith.divui %@@p@@sum1, %@@p@@parts : index
    %@@p@@b0 = arith.muli %@@p@@part, %@@p@@chunk : index
    %@@p@@begin = arith.minui %@@p@@b0, @@n@@ : index
    %@@p@@e0 = arith.addi %@@p@@begin, %@@p@@chunk : index
    %@@p@@end = arith.minui %@@p@@e0, @@n@@ : index
)",
                      {{"n", n}, {"p", p}});
}

std::string ropeAngle() {
  return R"(
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
)";
}

std::string ropeRotate(const std::string &type) {
  return fillTemplate(R"(
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
)",
                      {{"t3", type}});
}

// The pieces of batched attention kernels (Generators.h).
std::string batchPositionsArg(int64_t sequences) {
  return sequences ? ", %positions: memref<?xi32>" : "";
}
std::string batchSuffix(int64_t sequences) {
  return sequences ? "_b" + std::to_string(sequences) : "";
}
std::string batchTokenState(int64_t sequences) {
  if (!sequences)
    return R"(
    %past_t = arith.addi %past, %c0 : index
    %p = arith.addi %past, %t : index
    %base_t = arith.addi %c0, %c0 : index
    %row0 = arith.addi %c0, %c0 : index
)";
  return R"(
    %pos_i = memref.load %positions[%t] : memref<?xi32>
    %past_t = arith.index_cast %pos_i : i32 to index
    %p = arith.addi %past_t, %c0 : index
    %base_t = arith.muli %t, %slots : index
    %row0 = arith.addi %t, %c0 : index
)";
}
// %slots: a conversation's cache slots.
std::string batchCacheSlots(int64_t sequences, const std::string &kvt) {
  if (!sequences)
    return "  %slots = memref.dim %kc, %c0 : " + kvt + "\n";
  return "  %cache_rows = memref.dim %kc, %c0 : " + kvt + "\n  %sequences = arith.constant " +
         std::to_string(sequences) +
         " : index\n  %slots = arith.divui %cache_rows, %sequences : index\n";
}

std::string epsSuffix(double eps) {
  return "_eps" + std::to_string(static_cast<long long>(eps * 1e9));
}

std::string floatLiteral(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17e", value);
  return text;
}

std::string lookupTable(const std::string &name, int count, float (*decode)(uint8_t)) {
  std::string values;
  for (int code = 0; code < count; ++code) {
    float v = decode(static_cast<uint8_t>(code));
    values += (code ? ", " : "") + (v != v ? std::string("0x7FC00000") : floatLiteral(v));
  }
  return "memref.global \"private\" constant @" + name + " : memref<" + std::to_string(count) +
         "xf32> = dense<[" + values + "]>\n";
}

} // namespace kiln::kernels
