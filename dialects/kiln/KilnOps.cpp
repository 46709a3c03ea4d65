// Verifiers of the kiln ops. Each message names the operand and says what
// shape or value was expected, in the op's own vocabulary (tokens, heads,
// experts), so a model author can fix the builder without reading this file.
#include "dialects/kiln/KilnOps.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace mlir;

namespace kiln {
namespace {

// Dimensions may be dynamic (`?`): a dynamic size matches anything.
bool dimsMatch(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

std::string dimStr(int64_t d) {
  return ShapedType::isDynamic(d) ? std::string("?") : std::to_string(d);
}

RankedTensorType tensorType(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

// Emits "<what> must have rank <rank> (<layout>), got <type>" on mismatch.
LogicalResult expectRank(Operation *op, StringRef what, Value v, int64_t rank, StringRef layout) {
  RankedTensorType type = tensorType(v);
  if (type.getRank() == rank)
    return success();
  return op->emitOpError() << what << " must have rank " << rank << " (" << layout << "), got "
                           << type;
}

// Emits "<what> dimension <i> must be <expected> (<why>), got <type>".
LogicalResult expectDim(Operation *op, StringRef what, Value v, unsigned dim, int64_t expected,
                        StringRef why) {
  RankedTensorType type = tensorType(v);
  if (dimsMatch(type.getDimSize(dim), expected))
    return success();
  return op->emitOpError() << what << " dimension " << dim << " must be " << dimStr(expected)
                           << " (" << why << "), got " << type;
}

LogicalResult expectSameElementType(Operation *op, StringRef a, Value va, StringRef b, Value vb) {
  Type ea = tensorType(va).getElementType();
  Type eb = tensorType(vb).getElementType();
  if (ea == eb)
    return success();
  return op->emitOpError() << a << " and " << b << " must have the same element type, got " << ea
                           << " and " << eb;
}

} // namespace

//===----------------------------------------------------------------------===//
// kiln.weight
//===----------------------------------------------------------------------===//

static constexpr llvm::StringLiteral kExpertPlaceholder = "{e}";

bool WeightOp::isExpertStack() { return getName().contains(kExpertPlaceholder); }

std::string WeightOp::expandedName(int64_t expert) {
  StringRef name = getName();
  size_t at = name.find(kExpertPlaceholder);
  if (at == StringRef::npos)
    return name.str();
  return (name.take_front(at) + std::to_string(expert) +
          name.drop_front(at + kExpertPlaceholder.size()))
      .str();
}

LogicalResult WeightOp::verify() {
  StringRef name = getName();
  if (name.empty())
    return emitOpError() << "name must not be empty";
  if (llvm::any_of(name, [](char c) { return std::isspace(static_cast<unsigned char>(c)); }))
    return emitOpError() << "name '" << name << "' must not contain whitespace";
  size_t braces = name.count('{');
  if (braces != name.count('}') || braces > 1 ||
      (braces == 1 && !name.contains(kExpertPlaceholder)))
    return emitOpError() << "name '" << name << "' may hold one placeholder, and only '{e}'";
  RankedTensorType type = getResult().getType();
  if (!type.hasStaticShape())
    return emitOpError() << "checkpoint tensors have static shapes, got " << type;
  Type elem = type.getElementType();
  if (!(elem.isBF16() || elem.isF16() || elem.isF32() || llvm::isa<Float8E4M3FNType>(elem) ||
        elem.isUnsignedInteger(8) || elem.isSignlessInteger(32)))
    return emitOpError() << "element type must be one a checkpoint stores "
                            "(bf16, f16, f32, f8E4M3FN, ui8, i32), got "
                         << elem;
  if (isExpertStack() && type.getRank() < 1)
    return emitOpError() << "an expert stack ('{e}' in the name) needs a leading "
                            "expert dimension, got "
                         << type;
  return success();
}

//===----------------------------------------------------------------------===//
// kiln.nvfp4_dequant
//===----------------------------------------------------------------------===//

LogicalResult Nvfp4DequantOp::verify() {
  RankedTensorType result = getResult().getType();
  int64_t rank = result.getRank();
  if (rank < 2)
    return emitOpError() << "result must be a matrix or a stack of matrices "
                            "[..., out, in], got "
                         << result;
  if (failed(expectRank(*this, "packed", getPacked(), rank, "the result's rank")) ||
      failed(expectRank(*this, "scales", getScales(), rank, "the result's rank")) ||
      failed(expectRank(*this, "global", getGlobal(), rank - 2,
                        "the result's leading (stack) dimensions")))
    return failure();
  int64_t in = result.getDimSize(rank - 1);
  if (!ShapedType::isDynamic(in) && in % 16 != 0)
    return emitOpError() << "input dimension " << in
                         << " must be a multiple of 16 (one E4M3 scale per 16 values)";
  for (int64_t d = 0; d < rank - 1; ++d) {
    int64_t size = result.getDimSize(d);
    if (failed(expectDim(*this, "packed", getPacked(), d, size, "as the result")) ||
        failed(expectDim(*this, "scales", getScales(), d, size, "as the result")))
      return failure();
    if (d < rank - 2 &&
        failed(expectDim(*this, "global", getGlobal(), d, size, "one scale per matrix")))
      return failure();
  }
  int64_t packedIn = ShapedType::isDynamic(in) ? in : in / 2;
  int64_t scalesIn = ShapedType::isDynamic(in) ? in : in / 16;
  if (failed(
          expectDim(*this, "packed", getPacked(), rank - 1, packedIn, "two E2M1 values a byte")) ||
      failed(
          expectDim(*this, "scales", getScales(), rank - 1, scalesIn, "one scale per 16 values")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// kiln.embed, kiln.logits
//===----------------------------------------------------------------------===//

LogicalResult EmbedOp::verify() {
  if (failed(expectRank(*this, "table", getTable(), 2, "[vocab, hidden]")) ||
      failed(expectRank(*this, "ids", getIds(), 1, "[tokens]")) ||
      failed(expectRank(*this, "result", getResult(), 2, "[tokens, hidden]")) ||
      failed(expectDim(*this, "result", getResult(), 0, tensorType(getIds()).getDimSize(0),
                       "one row per id")) ||
      failed(expectDim(*this, "result", getResult(), 1, tensorType(getTable()).getDimSize(1),
                       "the table's width")))
    return failure();
  return success();
}

LogicalResult LogitsOp::verify() {
  if (failed(expectRank(*this, "input", getInput(), 2, "[tokens, hidden]")) ||
      failed(expectRank(*this, "head", getHead(), 2, "[vocab, hidden]")) ||
      failed(expectRank(*this, "result", getResult(), 2, "[tokens, vocab]")) ||
      failed(expectDim(*this, "head", getHead(), 1, tensorType(getInput()).getDimSize(1),
                       "the input's width")) ||
      failed(expectDim(*this, "result", getResult(), 1, tensorType(getHead()).getDimSize(0),
                       "the head's vocabulary")))
    return failure();
  int64_t rows = getLastOnly() ? 1 : tensorType(getInput()).getDimSize(0);
  return expectDim(*this, "result", getResult(), 0, rows,
                   getLastOnly() ? "last_only keeps one row" : "one row per token");
}

//===----------------------------------------------------------------------===//
// Norms and elementwise ops
//===----------------------------------------------------------------------===//

LogicalResult RmsNormOp::verify() {
  if (failed(expectRank(*this, "input", getInput(), 2, "[tokens, features]")) ||
      failed(expectRank(*this, "weight", getWeight(), 1, "[features]")) ||
      failed(expectDim(*this, "weight", getWeight(), 0, tensorType(getInput()).getDimSize(1),
                       "the input's feature width")))
    return failure();
  return success();
}

LogicalResult HeadNormOp::verify() {
  if (failed(expectRank(*this, "input", getInput(), 3, "[tokens, heads, head_dim]")) ||
      failed(expectRank(*this, "weight", getWeight(), 1, "[head_dim]")) ||
      failed(expectDim(*this, "weight", getWeight(), 0, tensorType(getInput()).getDimSize(2),
                       "the input's head_dim")))
    return failure();
  return success();
}

static LogicalResult verifyBroadcastBinary(Operation *op, Value lhs, Value rhs) {
  RankedTensorType l = tensorType(lhs), r = tensorType(rhs);
  if (failed(expectSameElementType(op, "lhs", lhs, "rhs", rhs)))
    return failure();
  if (r.getRank() > l.getRank())
    return op->emitOpError() << "rhs " << r << " has more dimensions than lhs " << l;
  int64_t offset = l.getRank() - r.getRank();
  for (int64_t d = 0; d < r.getRank(); ++d)
    if (!dimsMatch(r.getDimSize(d), l.getDimSize(offset + d)))
      return op->emitOpError() << "rhs " << r << " must match the trailing dimensions of lhs " << l
                               << " (it is broadcast over the leading ones)";
  return success();
}

LogicalResult MulOp::verify() { return verifyBroadcastBinary(*this, getLhs(), getRhs()); }
LogicalResult AddOp::verify() { return verifyBroadcastBinary(*this, getLhs(), getRhs()); }

//===----------------------------------------------------------------------===//
// kiln.linear
//===----------------------------------------------------------------------===//

LogicalResult LinearOp::verify() {
  if (failed(expectRank(*this, "input", getInput(), 2, "[tokens, in]")) ||
      failed(expectRank(*this, "weight", getWeight(), 2, "[out, in]")) ||
      failed(expectRank(*this, "result", getResult(), 2, "[tokens, out]")) ||
      failed(expectDim(*this, "weight", getWeight(), 1, tensorType(getInput()).getDimSize(1),
                       "the input's width")) ||
      failed(expectDim(*this, "result", getResult(), 0, tensorType(getInput()).getDimSize(0),
                       "one row per token")) ||
      failed(expectDim(*this, "result", getResult(), 1, tensorType(getWeight()).getDimSize(0),
                       "the weight's out dimension")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

static LogicalResult verifyHeadsView(Operation *op, Value flat, Value split) {
  if (failed(expectRank(op, "the [tokens, features] side", flat, 2, "[tokens, heads*head_dim]")) ||
      failed(expectRank(op, "the [tokens, heads, head_dim] side", split, 3,
                        "[tokens, heads, head_dim]")) ||
      failed(expectSameElementType(op, "input", flat, "result", split)))
    return failure();
  RankedTensorType f = tensorType(flat), s = tensorType(split);
  if (!dimsMatch(f.getDimSize(0), s.getDimSize(0)))
    return op->emitOpError() << "token counts differ: " << f << " and " << s;
  if (!f.hasStaticShape() || !s.hasStaticShape() || s.getDimSize(1) == ShapedType::kDynamic)
    return success();
  if (f.getDimSize(1) != s.getDimSize(1) * s.getDimSize(2))
    return op->emitOpError() << "features " << f.getDimSize(1) << " must equal heads ("
                             << s.getDimSize(1) << ") x head_dim (" << s.getDimSize(2) << ")";
  return success();
}

LogicalResult SplitHeadsOp::verify() { return verifyHeadsView(*this, getInput(), getResult()); }
LogicalResult MergeHeadsOp::verify() { return verifyHeadsView(*this, getResult(), getInput()); }

// What kiln.rope and kiln.head_norm_rope ask of the rotation.
static LogicalResult verifyRope(Operation *op, Value input, Value positions, double theta) {
  if (failed(expectRank(op, "input", input, 3, "[tokens, heads, head_dim]")) ||
      failed(expectRank(op, "positions", positions, 1, "[tokens]")) ||
      failed(expectDim(op, "positions", positions, 0, tensorType(input).getDimSize(0),
                       "one position per token")))
    return failure();
  int64_t headDim = tensorType(input).getDimSize(2);
  if (!ShapedType::isDynamic(headDim) && headDim % 2 != 0)
    return op->emitOpError() << "head_dim " << headDim
                             << " must be even (rotate-half pairs j and j + D/2)";
  if (!(theta > 1.0) || !std::isfinite(theta))
    return op->emitOpError() << "theta must be a finite base > 1, got " << theta;
  return success();
}

LogicalResult RopeOp::verify() {
  return verifyRope(*this, getInput(), getPositions(), getTheta().convertToDouble());
}

LogicalResult HeadNormRopeOp::verify() {
  if (failed(expectRank(*this, "weight", getWeight(), 1, "[head_dim]")) ||
      failed(verifyRope(*this, getInput(), getPositions(), getTheta().convertToDouble())) ||
      failed(expectDim(*this, "weight", getWeight(), 0, tensorType(getInput()).getDimSize(2),
                       "the input's head_dim")))
    return failure();
  return success();
}

LogicalResult AttentionOp::verify() {
  Operation *op = *this;
  if (failed(expectRank(op, "q", getQ(), 3, "[tokens, q_heads, head_dim]")) ||
      failed(expectRank(op, "k", getK(), 3, "[tokens, kv_heads, head_dim]")) ||
      failed(expectRank(op, "v", getV(), 3, "[tokens, kv_heads, v_head_dim]")) ||
      failed(expectRank(op, "positions", getPositions(), 1, "[tokens]")) ||
      failed(expectRank(op, "result", getResult(), 3, "[tokens, q_heads, v_head_dim]")))
    return failure();
  RankedTensorType q = tensorType(getQ()), k = tensorType(getK()), v = tensorType(getV());
  int64_t tokens = q.getDimSize(0), qHeads = q.getDimSize(1), kvHeads = k.getDimSize(1);
  if (failed(expectDim(op, "k", getK(), 0, tokens, "the queries' tokens")) ||
      failed(expectDim(op, "v", getV(), 0, tokens, "the queries' tokens")) ||
      failed(expectDim(op, "positions", getPositions(), 0, tokens, "one per token")) ||
      failed(expectDim(op, "k", getK(), 2, q.getDimSize(2), "the queries' head_dim")) ||
      failed(expectDim(op, "v", getV(), 1, kvHeads, "the keys' heads")) ||
      failed(expectDim(op, "result", getResult(), 0, tokens, "the queries' tokens")) ||
      failed(expectDim(op, "result", getResult(), 1, qHeads, "the query heads")) ||
      failed(expectDim(op, "result", getResult(), 2, v.getDimSize(2), "the values' head_dim")))
    return failure();
  if (!ShapedType::isDynamic(qHeads) && !ShapedType::isDynamic(kvHeads) &&
      (kvHeads == 0 || qHeads % kvHeads != 0))
    return emitOpError() << "query heads (" << qHeads << ") must be a multiple of KV heads ("
                         << kvHeads << ") for grouped-query attention";
  double scale = getScale().convertToDouble();
  if (!(scale > 0.0) || !std::isfinite(scale))
    return emitOpError() << "scale must be positive and finite, got " << scale;
  if (std::optional<int64_t> window = getWindow(); window && *window <= 0)
    return emitOpError() << "window must be a positive number of positions, got " << *window;
  std::optional<Type> kvType = getKvType();
  const bool fp8 = kvType && llvm::isa<Float8E4M3FNType>(*kvType);
  if (kvType && !kvType->isF32() && !kvType->isBF16() && !fp8)
    return emitOpError()
           << "kv_type must be f32, bf16 or f8E4M3FN (the KV cache's element type), got "
           << *kvType;
  if (std::optional<ArrayRef<double>> scales = getKvScales()) {
    if (!fp8)
      return emitOpError() << "kv_scales are an FP8 cache's only (kv_type f8E4M3FN)";
    if (scales->size() != 2)
      return emitOpError() << "kv_scales must be two scales (keys, values), got " << scales->size();
    for (double s : *scales)
      if (!(s > 0.0) || !std::isfinite(s))
        return emitOpError() << "kv_scales must be positive and finite, got " << s;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Latent mixture of experts
//===----------------------------------------------------------------------===//

LogicalResult RouterTopKOp::verify() {
  if (failed(expectRank(*this, "logits", getLogits(), 2, "[tokens, experts]")))
    return failure();
  RankedTensorType logits = tensorType(getLogits());
  int64_t experts = logits.getDimSize(1), k = getK();
  if (k < 1)
    return emitOpError() << "k must be at least 1, got " << k;
  if (!ShapedType::isDynamic(experts) && k > experts)
    return emitOpError() << "k (" << k << ") must not exceed the number of experts (" << experts
                         << ")";
  for (auto [name, value] : {std::pair<StringRef, Value>{"weights", getWeights()},
                             std::pair<StringRef, Value>{"indices", getIndices()}}) {
    if (failed(expectRank(*this, name, value, 2, "[tokens, k]")) ||
        failed(expectDim(*this, name, value, 0, logits.getDimSize(0), "the logits' tokens")) ||
        failed(expectDim(*this, name, value, 1, k, "k")))
      return failure();
  }
  return success();
}

// Shared by the ops that read a token's selected experts: `indices` is
// [tokens, k] and agrees with `input`'s leading dimensions.
static LogicalResult verifySelection(Operation *op, Value input, Value indices,
                                     unsigned inputRank) {
  if (failed(expectRank(op, "input", input, inputRank,
                        inputRank == 2 ? "[tokens, latent]" : "[tokens, k, latent]")) ||
      failed(expectRank(op, "indices", indices, 2, "[tokens, k]")) ||
      failed(expectDim(op, "indices", indices, 0, tensorType(input).getDimSize(0),
                       "the input's tokens")))
    return failure();
  if (inputRank == 3 && failed(expectDim(op, "indices", indices, 1, tensorType(input).getDimSize(1),
                                         "the input's k slots")))
    return failure();
  return success();
}

LogicalResult ExpertSwiGLUOp::verify() {
  Operation *op = *this;
  if (failed(verifySelection(op, getInput(), getIndices(), 2)) ||
      failed(expectRank(op, "gate", getGate(), 3, "[experts, intermediate, latent]")) ||
      failed(expectRank(op, "up", getUp(), 3, "[experts, intermediate, latent]")) ||
      failed(expectRank(op, "down", getDown(), 3, "[experts, latent, intermediate]")) ||
      failed(expectRank(op, "result", getResult(), 3, "[tokens, k, latent]")))
    return failure();
  RankedTensorType gate = tensorType(getGate());
  int64_t experts = gate.getDimSize(0), inter = gate.getDimSize(1);
  int64_t latent = tensorType(getInput()).getDimSize(1);
  if (failed(expectDim(op, "gate", getGate(), 2, latent, "the input's latent width")) ||
      failed(expectDim(op, "up", getUp(), 0, experts, "the gate's experts")) ||
      failed(expectDim(op, "up", getUp(), 1, inter, "the gate's intermediate width")) ||
      failed(expectDim(op, "up", getUp(), 2, latent, "the input's latent width")) ||
      failed(expectDim(op, "down", getDown(), 0, experts, "the gate's experts")) ||
      failed(expectDim(op, "down", getDown(), 1, latent, "the latent width it returns to")) ||
      failed(expectDim(op, "down", getDown(), 2, inter, "the gate's intermediate width")) ||
      failed(expectDim(op, "result", getResult(), 0, tensorType(getInput()).getDimSize(0),
                       "the input's tokens")) ||
      failed(expectDim(op, "result", getResult(), 1, tensorType(getIndices()).getDimSize(1),
                       "the k selected experts")) ||
      failed(expectDim(op, "result", getResult(), 2, latent, "the latent width")))
    return failure();
  return success();
}

LogicalResult ExpertNormOp::verify() {
  Operation *op = *this;
  if (failed(verifySelection(op, getInput(), getIndices(), 3)) ||
      failed(expectRank(op, "weight", getWeight(), 2, "[experts, latent]")) ||
      failed(expectDim(op, "weight", getWeight(), 1, tensorType(getInput()).getDimSize(2),
                       "the input's latent width")))
    return failure();
  return success();
}

LogicalResult CombineOp::verify() {
  Operation *op = *this;
  if (failed(expectRank(op, "input", getInput(), 3, "[tokens, k, latent]")) ||
      failed(expectRank(op, "weights", getWeights(), 2, "[tokens, k]")) ||
      failed(expectRank(op, "result", getResult(), 2, "[tokens, latent]")))
    return failure();
  RankedTensorType input = tensorType(getInput());
  if (failed(
          expectDim(op, "weights", getWeights(), 0, input.getDimSize(0), "the input's tokens")) ||
      failed(
          expectDim(op, "weights", getWeights(), 1, input.getDimSize(1), "the input's k slots")) ||
      failed(expectDim(op, "result", getResult(), 0, input.getDimSize(0), "the input's tokens")) ||
      failed(
          expectDim(op, "result", getResult(), 1, input.getDimSize(2), "the input's latent width")))
    return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

LogicalResult NormResidualOp::verify() {
  Operation *op = *this;
  if (failed(expectRank(op, "residual", getResidual(), 2, "[tokens, hidden]")))
    return failure();
  int64_t hidden = tensorType(getResidual()).getDimSize(1);
  for (auto [name, value] : {std::pair<StringRef, Value>{"post_weight", getPostWeight()},
                             std::pair<StringRef, Value>{"gate", getGate()},
                             std::pair<StringRef, Value>{"next_weight", getNextWeight()}})
    if (failed(expectRank(op, name, value, 1, "[hidden]")) ||
        failed(expectDim(op, name, value, 0, hidden, "the residual's width")))
      return failure();
  return success();
}

// Size of the device group a grid's listed axes span; emits on `op` when the
// grid is missing, dynamic, or an axis is out of range.
static FailureOr<int64_t> deviceGroupSize(Operation *op, FlatSymbolRefAttr gridName,
                                          ArrayRef<int16_t> axes) {
  auto grid = SymbolTable::lookupNearestSymbolFrom<shard::GridOp>(op, gridName);
  if (!grid)
    return op->emitOpError() << "grid " << gridName << " is not a shard.grid in scope";
  if (axes.empty())
    return op->emitOpError() << "grid_axes must name at least one axis of " << gridName;
  int64_t size = 1;
  for (int16_t axis : axes) {
    if (axis < 0 || axis >= grid.getRank())
      return op->emitOpError() << "grid axis " << axis << " is outside " << gridName << " of rank "
                               << grid.getRank();
    int64_t extent = grid.getShape()[axis];
    if (ShapedType::isDynamic(extent))
      return op->emitOpError() << "grid axis " << axis << " of " << gridName
                               << " must have a static size to split experts over";
    size *= extent;
  }
  return size;
}

static LogicalResult verifyExpertSplit(Operation *op, int64_t experts, int64_t group) {
  if (experts % group != 0)
    return op->emitOpError() << "expert parallelism of " << group
                             << " must divide the number of experts (" << experts << ")";
  return success();
}

FailureOr<int64_t> LocalExpertsOp::groupSize() {
  return deviceGroupSize(*this, getGridAttr(), getGridAxes());
}

LogicalResult LocalExpertsOp::verify() {
  if (getNumExperts() < 1)
    return emitOpError() << "num_experts must be positive, got " << getNumExperts();
  return expectRank(*this, "indices", getIndices(), 2, "[tokens, k]");
}

LogicalResult LocalExpertsOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> group = groupSize();
  if (failed(group))
    return failure();
  return verifyExpertSplit(*this, getNumExperts(), *group);
}

FailureOr<int64_t> MegaMoEOp::groupSize() {
  if (!getGridAttr())
    return int64_t{1};
  return deviceGroupSize(*this, getGridAttr(), *getGridAxes());
}

LogicalResult MegaMoEOp::verify() {
  Operation *op = *this;
  if (bool(getGridAttr()) != bool(getGridAxesAttr()))
    return emitOpError() << "grid and grid_axes come together";
  if (failed(verifySelection(op, getInput(), getIndices(), 2)) ||
      failed(expectRank(op, "weights", getWeights(), 2, "[tokens, k]")) ||
      failed(expectDim(op, "weights", getWeights(), 0, tensorType(getInput()).getDimSize(0),
                       "the input's tokens")) ||
      failed(expectDim(op, "weights", getWeights(), 1, tensorType(getIndices()).getDimSize(1),
                       "the k selected experts")) ||
      failed(expectRank(op, "gate", getGate(), 3, "[local experts, intermediate, latent]")) ||
      failed(expectRank(op, "up", getUp(), 3, "[local experts, intermediate, latent]")) ||
      failed(expectRank(op, "down", getDown(), 3, "[local experts, latent, intermediate]")) ||
      failed(expectRank(op, "post_norm", getPostNorm(), 2, "[local experts, latent]")))
    return failure();
  RankedTensorType gate = tensorType(getGate());
  int64_t local = gate.getDimSize(0), inter = gate.getDimSize(1);
  int64_t latent = tensorType(getInput()).getDimSize(1);
  if (failed(expectDim(op, "gate", getGate(), 2, latent, "the input's latent width")) ||
      failed(expectDim(op, "up", getUp(), 0, local, "the gate's experts")) ||
      failed(expectDim(op, "up", getUp(), 1, inter, "the gate's intermediate width")) ||
      failed(expectDim(op, "up", getUp(), 2, latent, "the input's latent width")) ||
      failed(expectDim(op, "down", getDown(), 0, local, "the gate's experts")) ||
      failed(expectDim(op, "down", getDown(), 1, latent, "the latent width")) ||
      failed(expectDim(op, "down", getDown(), 2, inter, "the gate's intermediate width")) ||
      failed(expectDim(op, "post_norm", getPostNorm(), 0, local, "the gate's experts")) ||
      failed(expectDim(op, "post_norm", getPostNorm(), 1, latent, "the latent width")))
    return failure();
  if (getNumExperts() < 1)
    return emitOpError() << "num_experts must be positive, got " << getNumExperts();
  return success();
}

LogicalResult MegaMoEOp::verifySymbolUses(SymbolTableCollection &) {
  FailureOr<int64_t> group = groupSize();
  if (failed(group) || failed(verifyExpertSplit(*this, getNumExperts(), *group)))
    return failure();
  int64_t local = tensorType(getGate()).getDimSize(0);
  if (!ShapedType::isDynamic(local) && local * *group != getNumExperts())
    return emitOpError() << "the stacks hold " << local << " experts per rank but "
                         << getNumExperts() << " experts over " << *group << " ranks need "
                         << getNumExperts() / *group;
  return success();
}

//===----------------------------------------------------------------------===//
// TokenWiseOp: the operands whose dimension 0 is the token dimension
//===----------------------------------------------------------------------===//

namespace {
using Operands = llvm::SmallVector<mlir::OpOperand *>;
// A broadcast binary op's rhs is per-token only when it has lhs's rank (a
// per-channel vector is broadcast over the tokens).
template <typename BinaryOp> Operands binaryTokenOperands(BinaryOp op) {
  Operands operands{&op.getLhsMutable()};
  if (op.getRhs().getType().getRank() == op.getLhs().getType().getRank())
    operands.push_back(&op.getRhsMutable());
  return operands;
}
} // namespace

Operands RmsNormOp::getTokenOperands() { return {&getInputMutable()}; }
Operands MulOp::getTokenOperands() { return binaryTokenOperands(*this); }
Operands AddOp::getTokenOperands() { return binaryTokenOperands(*this); }
Operands LinearOp::getTokenOperands() { return {&getInputMutable()}; }
Operands RouterTopKOp::getTokenOperands() { return {&getLogitsMutable()}; }
Operands LocalExpertsOp::getTokenOperands() { return {&getIndicesMutable()}; }
Operands ExpertSwiGLUOp::getTokenOperands() { return {&getInputMutable(), &getIndicesMutable()}; }
Operands ExpertNormOp::getTokenOperands() { return {&getInputMutable(), &getIndicesMutable()}; }
Operands CombineOp::getTokenOperands() { return {&getInputMutable(), &getWeightsMutable()}; }
Operands MegaMoEOp::getTokenOperands() {
  return {&getInputMutable(), &getIndicesMutable(), &getWeightsMutable()};
}
Operands NormResidualOp::getTokenOperands() { return {&getResidualMutable(), &getUpdateMutable()}; }

bool isRouterLogits(LinearOp op) {
  return llvm::any_of(op.getResult().getUsers(),
                      [](mlir::Operation *user) { return llvm::isa<RouterTopKOp>(user); });
}

} // namespace kiln

#include "dialects/kiln/KilnInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/kiln/KilnOps.cpp.inc"
