// countNonFinite: NaN and infinities of each float dtype a checkpoint holds,
// and nothing in the finite values next to them (the largest E4M3 value
// shares NaN's exponent bits).
#include "runtime/safetensors/NonFinite.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kiln {
namespace {

template <typename T> NonFiniteCount countOf(DType dtype, const std::vector<T> &values) {
  return countNonFinite(dtype, reinterpret_cast<const uint8_t *>(values.data()),
                        values.size() * sizeof(T));
}

TEST(NonFinite, F32AndF64) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  NonFiniteCount c = countOf<float>(DType::F32, {1.0f, -0.0f, 3e38f, -inf, nan, -nan, inf});
  EXPECT_EQ(c.nans, 2u);
  EXPECT_EQ(c.infinities, 2u);
  EXPECT_EQ(c.first, 3);
  EXPECT_FALSE(countOf<float>(DType::F32, {1.0f, std::numeric_limits<float>::max(),
                                           std::numeric_limits<float>::denorm_min()})
                   .any());
  c = countOf<double>(DType::F64, {0.5, std::nan("")});
  EXPECT_EQ(c.nans, 1u);
  EXPECT_EQ(c.first, 1);
}

TEST(NonFinite, Bf16AndF16) {
  // bf16: 0x7f7f is the largest finite, 0x7f80 +inf, 0xffc1 a negative NaN.
  NonFiniteCount c = countOf<uint16_t>(DType::BF16, {0x3f80, 0x7f7f, 0x7f80, 0xffc1});
  EXPECT_EQ(c.infinities, 1u);
  EXPECT_EQ(c.nans, 1u);
  EXPECT_EQ(c.first, 2);
  // f16: 0x7bff the largest finite, 0xfc00 -inf, 0x7e00 NaN.
  c = countOf<uint16_t>(DType::F16, {0x7bff, 0x7e00, 0xfc00});
  EXPECT_EQ(c.nans, 1u);
  EXPECT_EQ(c.infinities, 1u);
  EXPECT_EQ(c.first, 1);
}

TEST(NonFinite, Fp8) {
  // E4M3 (fn): 0x7e is 448, finite; only 0x7f and 0xff are NaN, no infinity.
  NonFiniteCount c = countOf<uint8_t>(DType::F8_E4M3, {0x7e, 0xfe, 0x78, 0xff, 0x7f});
  EXPECT_EQ(c.nans, 2u);
  EXPECT_EQ(c.infinities, 0u);
  EXPECT_EQ(c.first, 3);
  // E5M2: 0x7c +inf, 0x7d NaN, 0x7b the largest finite.
  c = countOf<uint8_t>(DType::F8_E5M2, {0x7b, 0x7c, 0x7d});
  EXPECT_EQ(c.infinities, 1u);
  EXPECT_EQ(c.nans, 1u);
  EXPECT_EQ(c.first, 1);
}

TEST(NonFinite, IntegersHaveNone) {
  EXPECT_FALSE(countOf<uint8_t>(DType::U8, {0xff, 0x7f}).any());
  EXPECT_FALSE(countOf<int32_t>(DType::I32, {-1, 0x7fc00000}).any());
}

TEST(NonFinite, Description) {
  NonFiniteCount one;
  one.nans = 1;
  one.first = 17;
  EXPECT_EQ(describeNonFinite(one), "1 NaN value (the first at element 17)");
  NonFiniteCount mixed;
  mixed.nans = 3;
  mixed.infinities = 1;
  mixed.first = 2;
  EXPECT_EQ(describeNonFinite(mixed), "3 NaN and 1 infinite values (the first at element 2)");
}

} // namespace
} // namespace kiln
