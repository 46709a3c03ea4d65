#include "runtime/core/DType.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(DType, SizesMatchTheSafetensorsSpec) {
  EXPECT_EQ(dtypeSize(DType::BF16), 2);
  EXPECT_EQ(dtypeSize(DType::F32), 4);
  EXPECT_EQ(dtypeSize(DType::F8_E4M3), 1);
  EXPECT_EQ(dtypeSize(DType::U8), 1);
  EXPECT_EQ(dtypeSize(DType::I64), 8);
}

TEST(DType, NamesRoundTrip) {
  for (DType dtype : {DType::BOOL, DType::U8, DType::I8, DType::U16, DType::I16, DType::U32,
                      DType::I32, DType::U64, DType::I64, DType::F16, DType::BF16, DType::F32,
                      DType::F64, DType::F8_E4M3, DType::F8_E5M2})
    EXPECT_EQ(parseDType(dtypeName(dtype)), dtype) << dtypeName(dtype);
}

TEST(DType, UnknownNamesAreRejected) {
  EXPECT_FALSE(parseDType("bf16").has_value()); // the format is case-sensitive
  EXPECT_FALSE(parseDType("F4").has_value());
  EXPECT_FALSE(parseDType("").has_value());
}

} // namespace
} // namespace kiln
