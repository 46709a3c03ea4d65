// The plan dialect's registration and verifiers.
#include "dialects/plan/PlanOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/plan/PlanDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/plan/PlanAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/plan/PlanTypes.cpp.inc"

using namespace mlir;

namespace kiln::plan {

void PlanDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/plan/PlanOps.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/plan/PlanAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/plan/PlanTypes.cpp.inc"
      >();
}

LogicalResult DimAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t constant,
                              int64_t perToken, int64_t align) {
  if (constant < 0 || perToken < 0)
    return emitError() << "a dimension's constant and per-token parts must not be negative";
  if (align < 1)
    return emitError() << "a dimension's alignment must be at least 1, got " << align;
  return success();
}

int64_t DimAttr::evaluate(int64_t tokens) const {
  int64_t size = getConstant() + getPerToken() * tokens;
  return (size + getAlign() - 1) / getAlign() * getAlign();
}

static int64_t elementBytes(Type type) {
  return std::max<int64_t>(1, type.getIntOrFloatBitWidth() / 8);
}

static LogicalResult verifyShape(Operation *op, ArrayAttr shape, Type elementType) {
  if (shape.empty())
    return op->emitOpError() << "needs at least one dimension";
  if (!elementType.isIntOrFloat())
    return op->emitOpError() << "element type must be an integer or float type, got "
                             << elementType;
  return success();
}

int64_t AllocOp::bytesFor(int64_t tokens) {
  int64_t bytes = elementBytes(getElementType());
  for (Attribute dim : getShape())
    bytes *= llvm::cast<DimAttr>(dim).evaluate(tokens);
  return bytes;
}

LogicalResult AllocOp::verify() {
  if (std::optional<int64_t> offset = getOffset(); offset && *offset % 64 != 0)
    return emitOpError() << "offset " << *offset << " is not 64-byte aligned";
  return verifyShape(*this, getShape(), getElementType());
}

LogicalResult BindingOp::verify() {
  StringRef kind = getKind();
  if (kind != "weight" && kind != "kv" && kind != "input" && kind != "output" && kind != "exchange")
    return emitOpError() << "kind must be weight, kv, input, output or exchange, got '" << kind
                         << "'";
  if (getIndex() < 0)
    return emitOpError() << "index must not be negative";
  if (kind == "exchange") {
    // The members' addresses: one i64 per member of the comm group.
    auto module = (*this)->getParentOfType<ModuleOp>();
    auto groups = module ? module->getAttrOfType<ArrayAttr>("plan.comm_groups") : ArrayAttr();
    int64_t count = groups ? static_cast<int64_t>(groups.size()) : 0;
    if (getIndex() >= count)
      return emitOpError() << "names comm group " << getIndex() << ", but the module's "
                           << "plan.comm_groups has " << count;
    auto group = llvm::dyn_cast<DictionaryAttr>(groups[getIndex()]);
    auto size = group ? group.getAs<IntegerAttr>("size") : IntegerAttr();
    auto dim = getShape().size() == 1 ? llvm::dyn_cast<DimAttr>(getShape()[0]) : DimAttr();
    if (!size || !dim || dim.getPerToken() != 0 || dim.getConstant() != size.getInt() ||
        !getElementType().isSignlessInteger(64))
      return emitOpError() << "an exchange table is [members] i64, one address per member of "
                              "its comm group";
  }
  return verifyShape(*this, getShape(), getElementType());
}

LogicalResult CollectiveOp::verify() {
  StringRef kind = getKind();
  if (kind != "all_reduce" && kind != "all_gather" && kind != "reduce_scatter")
    return emitOpError() << "kind must be all_reduce, all_gather or reduce_scatter, got '" << kind
                         << "'";
  auto module = (*this)->getParentOfType<ModuleOp>();
  auto groups = module ? module->getAttrOfType<ArrayAttr>("plan.comm_groups") : ArrayAttr();
  int64_t count = groups ? static_cast<int64_t>(groups.size()) : 0;
  if (getGroup() < 0 || getGroup() >= count)
    return emitOpError() << "names comm group " << getGroup() << ", but the module's "
                         << "plan.comm_groups has " << count;
  if (getAxis() < 0)
    return emitOpError() << "axis must not be negative, got " << getAxis();
  return success();
}

// The rank of a plan buffer whose defining op gives its shape, or none.
static std::optional<size_t> bufferRank(Value buffer) {
  if (auto alloc = buffer.getDefiningOp<AllocOp>())
    return alloc.getShape().size();
  if (auto view = buffer.getDefiningOp<ViewOp>())
    return view.getShape().size();
  if (auto binding = buffer.getDefiningOp<BindingOp>())
    return binding.getShape().size();
  return std::nullopt;
}

// "tmap:B:X,Y[,Z...]:S": the device address of a CUDA tensor map over
// buffer operand B, its box X x Y x ... elements (innermost first), the
// shared-memory swizzle S bytes. The artifact's checks do the rest (dtype,
// box sides up to 256, rows of 16-byte multiples).
static LogicalResult verifyTensorMapScalar(LaunchOp op, StringRef scalar) {
  SmallVector<StringRef> parts;
  scalar.split(parts, ':');
  SmallVector<StringRef> sides;
  int64_t buffer = 0, swizzle = 0;
  if (parts.size() == 4)
    parts[2].split(sides, ',');
  SmallVector<int64_t> box;
  for (StringRef side : sides)
    if (int64_t value; !side.getAsInteger(10, value))
      box.push_back(value);
  if (parts.size() != 4 || parts[1].getAsInteger(10, buffer) ||
      parts[3].getAsInteger(10, swizzle) || box.size() != sides.size())
    return op.emitOpError() << "scalar '" << scalar
                            << "' must be tmap:B:X,Y[,...]:S (buffer operand B, the box "
                               "innermost first, swizzle S bytes)";
  const int64_t buffers = static_cast<int64_t>(op.getBuffers().size());
  if (buffer < 0 || buffer >= buffers)
    return op.emitOpError() << "scalar '" << scalar << "' maps buffer " << buffer
                            << ", but the launch has " << buffers << " buffers";
  for (int64_t side : box)
    if (side < 1)
      return op.emitOpError() << "scalar '" << scalar << "': box sides must be positive, got "
                              << side;
  if (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)
    return op.emitOpError() << "scalar '" << scalar
                            << "': swizzle must be 0, 32, 64 or 128 bytes, got " << swizzle;
  if (std::optional<size_t> rank = bufferRank(op.getBuffers()[buffer]); rank && *rank != box.size())
    return op.emitOpError() << "scalar '" << scalar << "': a box of " << box.size()
                            << " sides for buffer " << buffer << " of rank " << *rank;
  return success();
}

LogicalResult LaunchOp::verify() {
  for (Attribute attr : getScalars()) {
    StringRef scalar = llvm::cast<StringAttr>(attr).getValue();
    if (scalar == "part" || scalar == "parts")
      continue;
    auto [kind, value] = scalar.split(':');
    if (kind == "tmap") {
      if (failed(verifyTensorMapScalar(*this, scalar)))
        return failure();
      continue;
    }
    int64_t number;
    if ((kind != "const" && kind != "tokens" && kind != "past" && kind != "group" &&
         kind != "seq") ||
        value.getAsInteger(10, number))
      return emitOpError() << "scalar '" << scalar
                           << "' must be const:N, tokens:N, past:N, group:N, seq:N, "
                              "tmap:B:X,Y:S, part or parts";
  }
  if (getMaxParts() < 1)
    return emitOpError() << "max_parts must be at least 1";
  if (bool(getGridAttr()) != bool(getBlockAttr()))
    return emitOpError() << "grid and block come together (GPU launches)";
  if (std::optional<int64_t> block = getBlock(); block && (*block < 1 || *block > 1024))
    return emitOpError() << "block must be 1 to 1024 threads, got " << *block;
  return success();
}

LogicalResult EntryOp::verify() {
  if (getMaxTokens() < 1)
    return emitOpError() << "max_tokens must be at least 1, got " << getMaxTokens();
  const int64_t rows = getSequenceRows().value_or(1);
  if (rows < 1 || (getSequenceRows() && !getSequences()))
    return emitOpError() << "sequence_rows (" << rows
                         << ") must be at least 1, and goes with sequences";
  if (std::optional<int64_t> sequences = getSequences();
      sequences && (*sequences < 2 || *sequences * rows != getMaxTokens()))
    return emitOpError() << "sequences (" << *sequences
                         << ") must be at least 2 and, times sequence_rows (" << rows
                         << "), equal max_tokens (" << getMaxTokens()
                         << "): token t continues conversation t / sequence_rows";
  if (std::optional<int64_t> split = getTokenSplit()) {
    if (*split < 2)
      return emitOpError() << "token_split must be at least 2, got " << *split;
    if (getSequences())
      return emitOpError() << "splits a batched entry's tokens: token_split and sequences "
                              "exclude each other";
  }
  return success();
}

} // namespace kiln::plan

#define GET_OP_CLASSES
#include "dialects/plan/PlanOps.cpp.inc"
