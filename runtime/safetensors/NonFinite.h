// Non-finite values in a tensor's bytes: NaN and infinities of the float
// dtypes a checkpoint holds (F64, F32, F16, BF16, F8_E4M3 (which has NaN
// but no infinity), F8_E5M2). Integer dtypes, and NVFP4's E2M1 codes
// stored as U8, have none.
#pragma once

#include "runtime/core/DType.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln {

struct NonFiniteCount {
  uint64_t nans = 0, infinities = 0;
  // The first non-finite element's index; -1 when there is none.
  int64_t first = -1;
  bool any() const { return first >= 0; }
};

// Counts the non-finite elements of `bytes` (size bytes, little-endian
// elements of `dtype`).
NonFiniteCount countNonFinite(DType dtype, const uint8_t *bytes, uint64_t size);

// "3 NaN and 1 infinite value(s) (the first at element 17)", for messages.
std::string describeNonFinite(const NonFiniteCount &count);

// For a row of computed values (logits): empty when every value is finite,
// else "the logits hold 3 NaN values (the first at element 17)", so that a
// tool can refuse them by name instead of comparing them or choosing a token.
std::string nonFiniteLogits(const float *values, size_t count);

} // namespace kiln
