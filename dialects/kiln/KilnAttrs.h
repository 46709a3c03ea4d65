// The kiln dialect's module attributes (generated from KilnAttrs.td):
// #kiln.weight_format<...> and #kiln.layout<...>, and the names they are set
// under on a graph's module.
#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"

#include "dialects/kiln/KilnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/kiln/KilnAttrs.h.inc"

namespace kiln {

inline constexpr llvm::StringLiteral kModelAttrName = "kiln.model";
inline constexpr llvm::StringLiteral kWeightFormatAttrName = "kiln.weight_format";
inline constexpr llvm::StringLiteral kLayoutAttrName = "kiln.layout";

// The graph's layout, or none for a single-device graph.
inline LayoutAttr graphLayout(mlir::ModuleOp module) {
  return module->getAttrOfType<LayoutAttr>(kLayoutAttrName);
}
// The graph's checkpoint format (bf16 when it says none).
inline CheckpointFormat graphWeightFormat(mlir::ModuleOp module) {
  auto format = module->getAttrOfType<CheckpointFormatAttr>(kWeightFormatAttrName);
  return format ? format.getValue() : CheckpointFormat::BF16;
}

} // namespace kiln
