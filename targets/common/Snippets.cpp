#include "targets/common/Generators.h"

#include <cstdio>

namespace kiln::kernels {

// The pieces of batched attention kernels (Generators.h).
std::string batchSuffix(SequenceLayout sequences) {
  if (!sequences)
    return "";
  return "_b" + std::to_string(sequences.count) +
         (sequences.rows > 1 ? "x" + std::to_string(sequences.rows) : "");
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
