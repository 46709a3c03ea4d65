// MXFP4 (OCP Microscaling, the FP4 format of AMD MI300/MI355X): a [rows,
// cols] matrix becomes `packed` u8 [rows, cols/2] (two E2M1 codes a byte, low
// nibble = even column, as NVFP4) and `scales` e8m0 [rows, cols/32] (one power
// of two per 32 consecutive columns). There is no global scale:
// value(r, c) = e2m1(code) * 2^(scales[r, c/32] - 127).
#pragma once

#include <cstdint>
#include <vector>

namespace kiln {

struct Mxfp4Matrix {
  int64_t rows = 0;
  int64_t cols = 0; // a multiple of 32
  std::vector<uint8_t> packed;
  std::vector<uint8_t> scales; // e8m0 codes
};

// Quantises a row-major f32 matrix. Each 32-block's scale is the smallest
// power of two >= block_amax / 6 (floatToE8m0 rounds up), so amax / scale is
// in (3, 6] and no element saturates; codes = e2m1(x / scale), round to
// nearest even. The OCP spec's rule, 2^(floor(log2 amax) - 2), puts amax /
// scale in [4, 8) and clips the (6, 8) part to 6; the two rules agree on
// every block the OCP rule does not clip. Per element the error is at most
// half the E2M1 step at |x| / scale times the scale (0.25, 0.5 or 1 times the
// scale below 2, 4 and above). All-zero blocks get scale code 0 (2^-127) and
// codes 0. Throws std::invalid_argument if cols is not a multiple of 32 or an
// element is not finite.
Mxfp4Matrix quantizeMxfp4(const float *values, int64_t rows, int64_t cols);

// Decodes into `out` (rows * cols floats, row-major). Exact: an E2M1 value
// times a power of two is an f32.
void dequantizeMxfp4(const uint8_t *packed, const uint8_t *scales, int64_t rows, int64_t cols,
                     float *out);

// Converts an NVFP4 matrix (see Nvfp4.h) to MXFP4. This is a requantisation,
// not a re-encoding: the NVFP4 values are decoded and quantised again with
// quantizeMxfp4, because an NVFP4 block scale (e4m3 * global, per 16) is in
// general neither a power of two nor shared by the two halves of a 32-block.
// Against the NVFP4 values v the error is quantizeMxfp4's: at most
// halfStep(|v| / s) * s with s < 2 * amax32(v) / 6, i.e. at most amax32(v) / 3;
// against the original f32 values it adds to the NVFP4 error. Values already
// on the MXFP4 grid convert exactly. Throws std::invalid_argument if cols is
// not a multiple of 32 or a decoded value is not finite (an e4m3 NaN scale).
Mxfp4Matrix nvfp4ToMxfp4(const uint8_t *packed, const uint8_t *scales, float globalScale,
                         int64_t rows, int64_t cols);

} // namespace kiln
