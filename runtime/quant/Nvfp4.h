// NVFP4 as ModelOpt stores it: a [rows, cols] matrix becomes `packed` u8
// [rows, cols/2] (two E2M1 codes a byte, low nibble = even column), `scales`
// e4m3 [rows, cols/16] (one per 16 consecutive columns) and one f32 global
// scale. value(r, c) = e2m1(code) * e4m3(scale[r, c/16]) * global.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

struct Nvfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0; // a multiple of 16
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales; // e4m3 codes
  float globalScale = 1.0f;
};

// Quantises a row-major f32 matrix the ModelOpt way: global = amax / (6 * 448),
// each block's scale = e4m3(block_amax / 6 / global), codes = e2m1(x / (scale *
// global)). Throws std::invalid_argument if cols is not a multiple of 16.
Nvfp4Matrix quantizeNvfp4(const float *values, int64_t rows, int64_t cols);

// Decodes into `out` (rows * cols floats, row-major).
void dequantizeNvfp4(const uint8_t *packed, const uint8_t *scales, float globalScale, int64_t rows,
                     int64_t cols, float *out);

} // namespace kiln
