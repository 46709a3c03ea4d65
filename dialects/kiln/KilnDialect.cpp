#include "dialects/kiln/KilnDialect.h"
#include "dialects/kiln/KilnAttrs.h"
#include "dialects/kiln/KilnOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/kiln/KilnDialect.cpp.inc"
#include "dialects/kiln/KilnEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/kiln/KilnAttrs.cpp.inc"

namespace kiln {

void KilnDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/kiln/KilnAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/kiln/KilnOps.cpp.inc"
      >();
}

// The module attributes of a graph: each of its type, on a module.
mlir::LogicalResult KilnDialect::verifyOperationAttribute(mlir::Operation *op,
                                                          mlir::NamedAttribute attribute) {
  llvm::StringRef name = attribute.getName().getValue();
  auto expect = [&](bool ok, llvm::StringRef what) -> mlir::LogicalResult {
    if (!llvm::isa<mlir::ModuleOp>(op))
      return op->emitError() << "'" << name << "' belongs on the graph's module";
    if (!ok)
      return op->emitError() << "'" << name << "' must be " << what << ", got "
                             << attribute.getValue();
    return mlir::success();
  };
  if (name == kModelAttrName)
    return expect(llvm::isa<mlir::StringAttr>(attribute.getValue()), "a string");
  if (name == kWeightFormatAttrName)
    return expect(llvm::isa<CheckpointFormatAttr>(attribute.getValue()),
                  "#kiln.weight_format<bf16|nvfp4>");
  if (name == kLayoutAttrName) {
    auto layout = llvm::dyn_cast<LayoutAttr>(attribute.getValue());
    if (mlir::failed(expect(bool(layout), "#kiln.layout<tp = N, ep = M>")))
      return mlir::failure();
    int64_t big = layout.devices(), small = std::min(layout.getTp(), layout.getEp());
    if (small < 1 || big % small != 0)
      return op->emitError() << "'" << name << "': tp and ep must be at least 1 and one must "
                             << "divide the other, got " << attribute.getValue();
    return mlir::success();
  }
  return mlir::success(); // kernels' own kiln.* attributes (kiln.tiling, kiln.target)
}

} // namespace kiln
