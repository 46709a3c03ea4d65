// Element types of checkpoint tensors and runtime buffers, with the names the
// safetensors format uses for them. Plain C++: shared by the runtime, the
// checkpoint tools and the model description.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t {
  BOOL,
  U8,
  I8,
  U16,
  I16,
  U32,
  I32,
  U64,
  I64,
  F16,
  BF16,
  F32,
  F64,
  F8_E4M3,
  F8_E5M2,
};

// Size of one element in bytes.
int64_t dtypeSize(DType dtype);
// The safetensors spelling: "BF16", "F8_E4M3", ...
std::string_view dtypeName(DType dtype);
// Inverse of dtypeName; nullopt for an unknown spelling.
std::optional<DType> parseDType(std::string_view name);

} // namespace kiln
