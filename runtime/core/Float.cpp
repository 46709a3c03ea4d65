// Narrow float conversions. The encoders share one routine for formats with
// subnormals (f16, e4m3fn): the code of a positive value is built as
// (biased exponent << mantissa bits) + mantissa, so a mantissa that rounds up
// to the next power of two carries into the exponent by plain addition.
//
// Choices the header leaves open: a NaN input to floatToE2m1 encodes as +0
// (E2M1 has no NaN); -0 keeps its sign in every format; f16 overflows to
// infinity as IEEE does (only e4m3 and e2m1 saturate).
#include "runtime/core/Float.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln {
namespace {

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Code of |value| (finite, >= 0) in a format with `mantBits` mantissa bits
// and exponent bias `bias`, rounded to nearest even, clamped to `maxCode`.
uint32_t encodeMagnitude(float magnitude, int mantBits, int bias, uint32_t maxCode,
                         float maxValue) {
  if (magnitude > maxValue)
    return maxCode;
  if (magnitude == 0.0f)
    return 0;
  const int minNormalExp = 1 - bias;
  int exp2;
  std::frexp(magnitude, &exp2); // magnitude = f * 2^exp2, f in [0.5, 1)
  int exponent = exp2 - 1;
  if (exponent < minNormalExp)
    exponent = minNormalExp; // subnormal: quantum of the smallest binade
  // Scaling by a power of two is exact, so only nearbyint rounds (the default
  // rounding mode is to nearest, ties to even).
  const double steps =
      std::nearbyint(std::ldexp(static_cast<double>(magnitude), mantBits - exponent));
  const uint32_t mantissaUnits = static_cast<uint32_t>(steps);
  uint32_t code;
  if (exponent == minNormalExp && mantissaUnits < (1u << mantBits))
    code = mantissaUnits; // subnormal (or rounded up into the first normal)
  else
    code =
        (static_cast<uint32_t>(exponent + bias) << mantBits) + (mantissaUnits - (1u << mantBits));
  return code > maxCode ? maxCode : code;
}

} // namespace

float bf16ToFloat(uint16_t bits) { return bitsFloat(static_cast<uint32_t>(bits) << 16); }

uint16_t floatToBf16(float value) {
  uint32_t bits = floatBits(value);
  if (std::isnan(value))
    return static_cast<uint16_t>((bits >> 16) | 0x0040); // keep quiet NaN
  // Adding 0x7fff plus the lowest kept bit rounds to nearest even; a carry
  // into the exponent is the correct result, up to infinity.
  const uint32_t lsb = (bits >> 16) & 1u;
  bits += 0x7fffu + lsb;
  return static_cast<uint16_t>(bits >> 16);
}

float f16ToFloat(uint16_t bits) {
  const uint32_t sign = (bits & 0x8000u) ? 1u : 0u;
  const int exponent = (bits >> 10) & 0x1f;
  const uint32_t mantissa = bits & 0x3ffu;
  float magnitude;
  if (exponent == 0x1f)
    magnitude =
        mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
  return sign ? -magnitude : magnitude;
}

uint16_t floatToF16(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value))
    return sign | 0x7e00;
  const float magnitude = std::fabs(value);
  // 65520 is halfway between 65504 (max finite) and 65536: it and everything
  // above round to infinity.
  if (magnitude >= 65520.0f)
    return sign | 0x7c00;
  return sign | static_cast<uint16_t>(encodeMagnitude(magnitude, 10, 15, 0x7bff, 65504.0f));
}

float e4m3ToFloat(uint8_t bits) {
  const bool negative = bits & 0x80;
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xf && mantissa == 0x7)
    magnitude = std::numeric_limits<float>::quiet_NaN();
  else if (exponent == 0)
    magnitude = std::ldexp(static_cast<float>(mantissa), -9); // 2^-6 * m/8
  else
    magnitude = std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return negative ? -magnitude : magnitude;
}

uint8_t floatToE4m3(float value) {
  const uint8_t sign = std::signbit(value) ? 0x80 : 0;
  if (std::isnan(value))
    return sign | 0x7f;
  return sign | static_cast<uint8_t>(encodeMagnitude(std::fabs(value), 3, 7, 0x7e, 448.0f));
}

float e2m1ToFloat(uint8_t bits) {
  static constexpr float kValues[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float magnitude = kValues[bits & 0x7];
  return (bits & 0x8) ? -magnitude : magnitude;
}

uint8_t floatToE2m1(float value) {
  if (std::isnan(value))
    return 0;
  const uint8_t sign = std::signbit(value) ? 0x8 : 0;
  const float a = std::fabs(value);
  // The code is how many midpoints between neighbouring grid values lie
  // below |value|; a tie goes to the even code (0, 1.0, 2.0, 4.0), hence >
  // at those midpoints and >= at the others. Counting, not branching: random
  // weights would mispredict every branch of an if-chain.
  const int code = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) +
                   (a >= 3.5f) + (a > 5.0f);
  return static_cast<uint8_t>(sign | code);
}

float e8m0ToFloat(uint8_t bits) {
  if (bits == 0xff)
    return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(bits) - 127);
}

uint8_t floatToE8m0(float value) {
  if (std::isnan(value))
    return 0xff;
  const float magnitude = std::fabs(value);
  if (magnitude == 0.0f)
    return 0;
  if (std::isinf(magnitude))
    return 0xfe;
  // magnitude = f * 2^exp2 with f in [0.5, 1): ceil(log2) is exp2 - 1 when
  // magnitude is exactly 2^(exp2 - 1) and exp2 otherwise. frexp is exact, f32
  // subnormals included.
  int exp2;
  const float fraction = std::frexp(magnitude, &exp2);
  const int exponent = fraction == 0.5f ? exp2 - 1 : exp2;
  if (exponent < -127)
    return 0;
  if (exponent > 127)
    return 0xfe;
  return static_cast<uint8_t>(exponent + 127);
}

} // namespace kiln
