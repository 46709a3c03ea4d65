#include "runtime/core/DType.h"

#include <array>

namespace kiln {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  int64_t size;
};
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::BOOL, "BOOL", 1},
    {DType::U8, "U8", 1},
    {DType::I8, "I8", 1},
    {DType::U16, "U16", 2},
    {DType::I16, "I16", 2},
    {DType::U32, "U32", 4},
    {DType::I32, "I32", 4},
    {DType::U64, "U64", 8},
    {DType::I64, "I64", 8},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::F32, "F32", 4},
    {DType::F64, "F64", 8},
    {DType::F8_E4M3, "F8_E4M3", 1},
    {DType::F8_E5M2, "F8_E5M2", 1},
}};

const DTypeInfo &info(DType dtype) { return kDTypes[static_cast<size_t>(dtype)]; }
} // namespace

int64_t dtypeSize(DType dtype) { return info(dtype).size; }
std::string_view dtypeName(DType dtype) { return info(dtype).name; }

std::optional<DType> parseDType(std::string_view name) {
  for (const DTypeInfo &entry : kDTypes)
    if (entry.name == name)
      return entry.dtype;
  return std::nullopt;
}

} // namespace kiln
