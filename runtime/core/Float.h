// Conversions between f32 and the narrow float formats checkpoints store:
// bf16, f16, float8 e4m3fn (OCP FP8, no infinities, NaN = S.1111.111) and
// e2m1 (FP4: 1 sign, 2 exponent, 1 mantissa bits; values 0, 0.5, 1, 1.5, 2, 3,
// 4, 6 and their negatives). Encoding rounds to nearest, ties to even; e4m3
// and e2m1 encodings saturate to the largest finite value.
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

} // namespace kiln
