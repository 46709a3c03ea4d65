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
std::string batchSuffix(int64_t sequences) {
  return sequences ? "_b" + std::to_string(sequences) : "";
}

std::string epsSuffix(double eps) {
  return "_eps" + std::to_string(static_cast<long long>(eps * 1e9));
}

std::string floatLiteral(double value) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17e", value);
  return text;
}

} // namespace kiln::kernels
