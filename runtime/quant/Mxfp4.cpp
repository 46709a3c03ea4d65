// MXFP4 quantisation, its inverse, and the NVFP4 -> MXFP4 requantisation.
//
// All scaling is by powers of two, so the only rounding is floatToE2m1's:
// x / scale is exact except below 2^-126, where it rounds to code 0 anyway,
// and e2m1 * scale is exact except past FLT_MAX (inputs within 15% of
// FLT_MAX, |x| > 3.5 * 2^126, can round up to 4 * 2^126 = 2^128 = inf).
#include "runtime/quant/Mxfp4.h"

#include "runtime/core/Float.h"
#include "runtime/quant/Nvfp4.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kiln {
namespace {

constexpr int64_t kBlock = 32;
constexpr float kE2m1Max = 6.0f;

void checkShape(int64_t rows, int64_t cols, const char *what) {
  if (rows < 0 || cols < 0)
    throw std::invalid_argument(std::string(what) + ": negative shape [" + std::to_string(rows) +
                                ", " + std::to_string(cols) + "]");
  if (cols % kBlock != 0)
    throw std::invalid_argument(std::string(what) + ": cols = " + std::to_string(cols) +
                                " is not a multiple of 32");
}

} // namespace

Mxfp4Matrix quantizeMxfp4(const float *values, int64_t rows, int64_t cols) {
  checkShape(rows, cols, "quantizeMxfp4");
  const int64_t count = rows * cols;
  Mxfp4Matrix result;
  result.rows = rows;
  result.cols = cols;
  result.packed.assign(static_cast<size_t>(count / 2), 0);
  result.scales.assign(static_cast<size_t>(count / kBlock), 0);

  const int64_t blocksPerRow = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocksPerRow; ++b) {
      const int64_t start = r * cols + b * kBlock;
      const float *block = values + start;
      float amax = 0.0f;
      for (int64_t i = 0; i < kBlock; ++i) {
        const float a = std::fabs(block[i]);
        if (!std::isfinite(a))
          throw std::invalid_argument("quantizeMxfp4: element " + std::to_string(start + i) +
                                      " is not finite");
        amax = std::max(amax, a);
      }
      if (amax == 0.0f)
        continue; // scale code 0, codes 0
      // amax / 6 rounds in f32, but only across a power of two by under an
      // ulp: then amax / scale is 6 plus a few ulps, which E2M1 rounds to 6.
      const uint8_t scaleCode = floatToE8m0(amax / kE2m1Max);
      result.scales[static_cast<size_t>(r * blocksPerRow + b)] = scaleCode;
      const float scale = e8m0ToFloat(scaleCode);
      uint8_t *out = result.packed.data() + start / 2;
      for (int64_t i = 0; i < kBlock; i += 2) {
        const uint8_t low = floatToE2m1(block[i] / scale);
        const uint8_t high = floatToE2m1(block[i + 1] / scale);
        out[i / 2] = static_cast<uint8_t>(low | (high << 4));
      }
    }
  }
  return result;
}

void dequantizeMxfp4(const uint8_t *packed, const uint8_t *scales, int64_t rows, int64_t cols,
                     float *out) {
  checkShape(rows, cols, "dequantizeMxfp4");
  const int64_t blocksPerRow = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 2) {
      const float scale = e8m0ToFloat(scales[r * blocksPerRow + c / kBlock]);
      const uint8_t byte = packed[(r * cols + c) / 2];
      out[r * cols + c] = e2m1ToFloat(byte & 0xf) * scale;
      out[r * cols + c + 1] = e2m1ToFloat(byte >> 4) * scale;
    }
  }
}

Mxfp4Matrix nvfp4ToMxfp4(const uint8_t *packed, const uint8_t *scales, float globalScale,
                         int64_t rows, int64_t cols) {
  checkShape(rows, cols, "nvfp4ToMxfp4");
  std::vector<float> values(static_cast<size_t>(rows * cols));
  dequantizeNvfp4(packed, scales, globalScale, rows, cols, values.data());
  return quantizeMxfp4(values.data(), rows, cols);
}

} // namespace kiln
