#include "targets/common/Generators.h"

#include <cstdio>

namespace kiln::kernels {

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
