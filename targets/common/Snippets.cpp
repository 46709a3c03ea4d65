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
