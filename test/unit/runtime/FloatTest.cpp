// Narrow float conversions against the format definitions.
#include "runtime/core/Float.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace kiln {
namespace {

uint32_t bitsOf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

float fromBits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

TEST(FloatTest, E2m1DecodesAllSixteenCodes) {
  const float expected[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (uint8_t code = 0; code < 16; ++code) {
    EXPECT_EQ(bitsOf(e2m1ToFloat(code)), bitsOf(expected[code])) << "code " << int(code);
    EXPECT_EQ(floatToE2m1(expected[code]), code) << "code " << int(code);
  }
  // Only the low nibble counts.
  EXPECT_EQ(e2m1ToFloat(0xf7), 6.0f);
}

TEST(FloatTest, E2m1RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(floatToE2m1(0.25f), 0); // tie 0 / 0.5 -> 0
  EXPECT_EQ(floatToE2m1(0.26f), 1);
  EXPECT_EQ(floatToE2m1(0.75f), 2); // tie 0.5 / 1 -> 1
  EXPECT_EQ(floatToE2m1(1.25f), 2); // tie 1 / 1.5 -> 1
  EXPECT_EQ(floatToE2m1(1.75f), 4); // tie 1.5 / 2 -> 2
  EXPECT_EQ(floatToE2m1(2.5f), 4);  // tie 2 / 3 -> 2
  EXPECT_EQ(floatToE2m1(3.5f), 6);  // tie 3 / 4 -> 4
  EXPECT_EQ(floatToE2m1(5.0f), 6);  // tie 4 / 6 -> 4
  EXPECT_EQ(floatToE2m1(5.01f), 7);
  EXPECT_EQ(floatToE2m1(-2.9f), 0x8 | 5);
  EXPECT_EQ(floatToE2m1(7.0f), 7);
  EXPECT_EQ(floatToE2m1(1e30f), 7);
  EXPECT_EQ(floatToE2m1(-std::numeric_limits<float>::infinity()), 0xf);
  EXPECT_EQ(floatToE2m1(std::numeric_limits<float>::quiet_NaN()), 0);
}

// The OCP E4M3FN value of a code, from the definition.
float e4m3Reference(int code) {
  const int e = (code >> 3) & 0xf;
  const int m = code & 0x7;
  const double sign = (code & 0x80) ? -1.0 : 1.0;
  if (e == 0)
    return static_cast<float>(sign * std::ldexp(m / 8.0, -6));
  return static_cast<float>(sign * std::ldexp(1.0 + m / 8.0, e - 7));
}

TEST(FloatTest, E4m3DecodesEveryCode) {
  for (int code = 0; code < 256; ++code) {
    const float value = e4m3ToFloat(static_cast<uint8_t>(code));
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(value)) << "code " << code;
      continue;
    }
    EXPECT_EQ(bitsOf(value), bitsOf(e4m3Reference(code))) << "code " << code;
  }
  EXPECT_EQ(e4m3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(e4m3ToFloat(0xfe), -448.0f);
  EXPECT_EQ(e4m3ToFloat(0x01), 0.001953125f); // 2^-9, smallest subnormal
  EXPECT_EQ(e4m3ToFloat(0x07), 0.013671875f); // 7 * 2^-9
  EXPECT_EQ(e4m3ToFloat(0x08), 0.015625f);    // 2^-6, smallest normal
  EXPECT_EQ(e4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(e4m3ToFloat(0x3c), 1.5f);
  EXPECT_EQ(e4m3ToFloat(0x40), 2.0f);
  EXPECT_EQ(e4m3ToFloat(0x77), 240.0f);
}

// The packed staged expert kernels (targets/common/PackedStagedDot.cpp)
// rewrite each E2M1 code of a word of eight as an E4M3 byte whose value is
// the code's over 64 (high codes: w & 0x80808080 | w >> 2 & 0x1C1C1C1C; low
// codes: w << 4 & 0x80808080 | w << 2 & 0x1C1C1C1C), then convert the bytes
// to f16 in hardware. Every code pair of a byte, in both places, holds it.
TEST(FloatTest, E2m1CodesAsE4m3BytesAreTheirValuesOver64) {
  for (uint32_t pair = 0; pair < 256; ++pair) {
    const uint32_t word = pair * 0x01010101u;
    const uint32_t high = (word & 0x80808080u) | ((word >> 2) & 0x1C1C1C1Cu);
    const uint32_t low = ((word << 4) & 0x80808080u) | ((word << 2) & 0x1C1C1C1Cu);
    for (int byte = 0; byte < 4; ++byte) {
      const auto at = [&](uint32_t w) { return static_cast<uint8_t>(w >> (8 * byte)); };
      EXPECT_EQ(e4m3ToFloat(at(high)) * 64.0f, e2m1ToFloat(static_cast<uint8_t>(pair >> 4)))
          << "pair " << pair << " byte " << byte;
      EXPECT_EQ(e4m3ToFloat(at(low)) * 64.0f, e2m1ToFloat(static_cast<uint8_t>(pair & 15)))
          << "pair " << pair << " byte " << byte;
    }
  }
}

TEST(FloatTest, E4m3EncodeInvertsDecode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f)
      continue;
    EXPECT_EQ(floatToE4m3(e4m3ToFloat(static_cast<uint8_t>(code))), code) << "code " << code;
  }
}

TEST(FloatTest, E4m3RoundsSaturatesAndKeepsNaN) {
  // Halfway between 1.0 (0x38) and 1.125 (0x39): even mantissa wins.
  EXPECT_EQ(floatToE4m3(1.0625f), 0x38);
  EXPECT_EQ(floatToE4m3(1.0626f), 0x39);
  // Halfway between 1.125 and 1.25 (0x3a): even.
  EXPECT_EQ(floatToE4m3(1.1875f), 0x3a);
  // Mantissa rounding up carries into the exponent: 1.9375 -> 2.
  EXPECT_EQ(floatToE4m3(1.96875f), 0x40);
  // Subnormal ties: 1.5 * 2^-9 between codes 1 and 2 -> 2; 0.5 * 2^-9 -> 0.
  EXPECT_EQ(floatToE4m3(std::ldexp(1.5f, -9)), 0x02);
  EXPECT_EQ(floatToE4m3(std::ldexp(0.5f, -9)), 0x00);
  EXPECT_EQ(floatToE4m3(std::ldexp(0.5f, -9) * 1.01f), 0x01);
  // Largest subnormal rounding up into the smallest normal.
  EXPECT_EQ(floatToE4m3(std::ldexp(7.6f, -9)), 0x08);
  EXPECT_EQ(floatToE4m3(449.0f), 0x7e);
  EXPECT_EQ(floatToE4m3(480.0f), 0x7e);
  EXPECT_EQ(floatToE4m3(1e20f), 0x7e);
  EXPECT_EQ(floatToE4m3(-1e20f), 0xfe);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(floatToE4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  EXPECT_EQ(floatToE4m3(1e-30f), 0x00);
  EXPECT_EQ(floatToE4m3(-1e-30f), 0x80);
}

TEST(FloatTest, Bf16RoundTripAndTiesToEven) {
  for (uint32_t bits = 0; bits < 0x10000; bits += 7) {
    const float value = bf16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value))
      continue;
    EXPECT_EQ(floatToBf16(value), bits);
  }
  EXPECT_EQ(bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even.
  EXPECT_EQ(floatToBf16(fromBits(0x3f808000)), 0x3f80);
  // Halfway between 0x3f81 and 0x3f82: even is 0x3f82.
  EXPECT_EQ(floatToBf16(fromBits(0x3f818000)), 0x3f82);
  EXPECT_EQ(floatToBf16(fromBits(0x3f808001)), 0x3f81);
  EXPECT_EQ(floatToBf16(fromBits(0x3f807fff)), 0x3f80);
  EXPECT_EQ(floatToBf16(-0.0f), 0x8000);
  // Rounding the largest float overflows to infinity, as IEEE does.
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(floatToBf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits in the dropped bits stays a NaN.
  EXPECT_TRUE(std::isnan(bf16ToFloat(floatToBf16(fromBits(0x7f800001)))));
}

TEST(FloatTest, F16RoundTripAndEdges) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = f16ToFloat(static_cast<uint16_t>(bits));
    if (std::isnan(value)) {
      EXPECT_TRUE(std::isnan(f16ToFloat(floatToF16(value))));
      continue;
    }
    ASSERT_EQ(floatToF16(value), bits) << "bits " << bits;
  }
  EXPECT_EQ(f16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(f16ToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(f16ToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(floatToF16(65519.0f), 0x7bff);
  EXPECT_EQ(floatToF16(65520.0f), 0x7c00);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even.
  EXPECT_EQ(floatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  EXPECT_EQ(floatToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(floatToF16(std::ldexp(1.0f, -25)), 0x0000); // tie -> 0
  EXPECT_EQ(floatToF16(std::ldexp(1.5f, -25)), 0x0001);
}

} // namespace
} // namespace kiln
