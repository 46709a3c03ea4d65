// The checkpoint dtype a kiln tensor element type stands for: what a
// kiln.weight of that element type reads from a safetensors file.
#pragma once

#include "runtime/core/DType.h"

#include "mlir/IR/BuiltinTypes.h"

#include <optional>

namespace kiln {

inline std::optional<DType> checkpointDType(mlir::Type t) {
  if (t.isBF16())
    return DType::BF16;
  if (t.isF16())
    return DType::F16;
  if (t.isF32())
    return DType::F32;
  if (llvm::isa<mlir::Float8E4M3FNType>(t))
    return DType::F8_E4M3;
  if (t.isUnsignedInteger(8))
    return DType::U8;
  if (t.isSignlessInteger(32))
    return DType::I32;
  return std::nullopt;
}

} // namespace kiln
