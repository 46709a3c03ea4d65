// NVFP4 quantisation (ModelOpt recipe) and its inverse.
//
// Degenerate inputs: an all-zero matrix gets global scale 1 (not 0, so that
// nothing downstream divides by zero) with all scales and codes 0; a block
// whose scale encodes to e4m3 zero gets codes 0. Non-finite input values are
// rejected with std::invalid_argument: no scale could represent them.
#include "runtime/quant/Nvfp4.h"

#include "runtime/core/Float.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kiln {
namespace {

constexpr int64_t kBlock = 16;
constexpr float kE2m1Max = 6.0f;
constexpr float kE4m3Max = 448.0f;

void checkShape(int64_t rows, int64_t cols, const char *what) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument(std::string(what) + ": negative shape [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  if (cols % kBlock != 0)
    throw std::invalid_argument(std::string(what) + ": cols = " + std::to_string(cols) +
                                " is not a multiple of 16");
}

} // namespace

Nvfp4Matrix quantizeNvfp4(const float *values, int64_t rows, int64_t cols) {
  checkShape(rows, cols, "quantizeNvfp4");
  const int64_t count = rows * cols;
  float amax = 0.0f;
  for (int64_t i = 0; i < count; ++i) {
    const float a = std::fabs(values[i]);
    if (!std::isfinite(a))
      throw std::invalid_argument("quantizeNvfp4: element " + std::to_string(i) + " is not finite");
    amax = std::max(amax, a);
  }

  Nvfp4Matrix result;
  result.rows = rows;
  result.cols = cols;
  result.packed.assign(static_cast<size_t>(count / 2), 0);
  result.scales.assign(static_cast<size_t>(count / kBlock), 0);
  result.globalScale = amax > 0.0f ? amax / (kE2m1Max * kE4m3Max) : 1.0f;
  if (amax == 0.0f || result.globalScale == 0.0f) {
    // A subnormal amax underflows the division: treat it as all zero too.
    result.globalScale = 1.0f;
    return result;
  }
  const float global = result.globalScale;

  const int64_t blocksPerRow = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      const float *block = values + r * cols + b * kBlock;
      float blockAmax = 0.0f;
      for (int64_t i = 0; i < kBlock; ++i)
        blockAmax = std::max(blockAmax, std::fabs(block[i]));
      const uint8_t scaleCode = floatToE4m3(blockAmax / kE2m1Max / global);
      result.scales[static_cast<size_t>(r * blocksPerRow + b)] = scaleCode;
      const float scale = e4m3ToFloat(scaleCode) * global;
      if (scale == 0.0f)
        continue; // codes stay 0
      uint8_t *out = result.packed.data() + (r * cols + b * kBlock) / 2;
      for (int64_t i = 0; i < kBlock; i += 2) {
        const uint8_t low = floatToE2m1(block[i] / scale);
        const uint8_t high = floatToE2m1(block[i + 1] / scale);
        out[i / 2] = static_cast<uint8_t>(low | (high << 4));
      }
    }
  }
  return result;
}

void dequantizeNvfp4(const uint8_t *packed, const uint8_t *scales, float globalScale, int64_t rows,
                     int64_t cols, float *out) {
  checkShape(rows, cols, "dequantizeNvfp4");
  const int64_t blocksPerRow = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 2) {
      // e2m1 * e4m3 is exact in f32, so only the global multiply rounds.
      const float scale = e4m3ToFloat(scales[r * blocksPerRow + c / kBlock]);
      const uint8_t byte = packed[(r * cols + c) / 2];
      out[r * cols + c] = e2m1ToFloat(byte & 0xf) * scale * globalScale;
      out[r * cols + c + 1] = e2m1ToFloat(byte >> 4) * scale * globalScale;
    }
  }
}

} // namespace kiln
