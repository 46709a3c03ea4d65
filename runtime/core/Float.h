// Conversions between f32 and the narrow float formats checkpoints store:
// bf16, f16, float8 e4m3fn (OCP FP8, no infinities, NaN = S.1111.111) and
// e2m1 (FP4: 1 sign, 2 exponent, 1 mantissa bits; values 0, 0.5, 1, 1.5, 2, 3,
// 4, 6 and their negatives). Encoding rounds to nearest, ties to even; e4m3
// and e2m1 encodings saturate to the largest finite value. E8M0 (the OCP MX
// block scale) is the exception: see floatToE8m0.
#pragma once

#include <cstdint>

namespace kiln {

float bf16ToFloat(uint16_t bits);
uint16_t floatToBf16(float value);
float f16ToFloat(uint16_t bits);
uint16_t floatToF16(float value);
float e4m3ToFloat(uint8_t bits);
uint8_t floatToE4m3(float value);
// `bits` is a 4-bit code in the low nibble.
float e2m1ToFloat(uint8_t bits);
uint8_t floatToE2m1(float value);
// E8M0: 8 exponent bits, no sign, no mantissa; code c is 2^(c - 127) for c in
// [0, 254] (2^-127 is an f32 subnormal, still exact) and 255 is NaN.
float e8m0ToFloat(uint8_t bits);
// Rounds *up*: the code of the smallest power of two >= |value|, so that a
// block scale chosen as floatToE8m0(amax / 6) never makes amax / scale exceed
// the E2M1 maximum. Clamped to [2^-127, 2^127] (codes 0 and 254): 0, values
// below 2^-127 and infinities clamp; NaN gives the NaN code 255.
uint8_t floatToE8m0(float value);

} // namespace kiln
