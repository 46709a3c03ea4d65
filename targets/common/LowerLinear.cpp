// The lowering of the linear products, kiln.linear and kiln.logits: the
// target's matrix-core GEMM for prefill-shaped products, its tiled GEMM on
// VNNI-blocked weights, or its GEMV (TargetHooks).
#include "targets/common/Lowering.h"

namespace kiln::kernels::lowering {

void Lowering::launchMatrixGemm(const TargetHooks::MatrixGemm &gemm, int64_t n, const Buf &x,
                                const Buf &w, const Buf &y, StringRef what, Value source) {
  Buf in = x;
  if (gemm.cast) {
    const Bf16CopyKey key = bf16CopyKey(source, gemm.cast->name);
    auto copy = source ? bf16Copies.find(key) : bf16Copies.end();
    if (copy != bf16Copies.end()) {
      in = copy->second;
    } else {
      in = allocShape({rows(), x.shape.back()}, b.getBF16Type());
      launch(*gemm.cast, {x, in}, {"tokens:0", "part", "parts"}, gemm.castWork, what);
      if (source)
        bf16Copies[key] = in;
    }
  }
  SmallVector<StringRef> scalars(gemm.scalars.begin(), gemm.scalars.end());
  if (gemm.splits == 1) {
    launch(gemm.kernel, {in, w, y}, scalars, gemm.work, what);
    return;
  }
  Buf partial = allocShape({fixed(gemm.splits), rows(), fixed(n)}, b.getF32Type());
  launch(gemm.kernel, {in, w, partial}, scalars, gemm.work, what);
  launch(*gemm.sum, {partial, y}, {"tokens:0", "part", "parts"}, gemm.sumWork, what);
}

std::optional<Lowering::Bf16CopyKey> Lowering::pendingBf16Copy(Value value) {
  for (Operation *user : value.getUsers()) {
    auto linear = llvm::dyn_cast<LinearOp>(user);
    if (!linear || linear.getInput() != value || isRouterLogits(linear))
      continue;
    auto wType = llvm::cast<RankedTensorType>(linear.getWeight().getType());
    if (!wType.getElementType().isBF16())
      continue;
    if (auto matrix = hooks.matrixGemm(wType.getDimSize(0), wType.getDimSize(1), maxRows(),
                                       /*exact=*/false);
        matrix && matrix->cast)
      return bf16CopyKey(value, matrix->cast->name);
  }
  return std::nullopt;
}

bool Lowering::launchNormWithBf16Copy(Value result, int64_t width,
                                      llvm::function_ref<std::optional<KernelLaunch>()> withCopy,
                                      ArrayRef<Buf> buffers, StringRef what) {
  std::optional<Bf16CopyKey> copy = pendingBf16Copy(result);
  if (!copy)
    return false;
  std::optional<KernelLaunch> fused = withCopy();
  if (!fused)
    return false;
  SmallVector<Buf> all(buffers.begin(), buffers.end());
  all.push_back(alloc({width}, b.getBF16Type()));
  launch(fused->kernel, all, {"tokens:0", "part", "parts"}, fused->work, what);
  bf16Copies[*copy] = all.back();
  return true;
}

void Lowering::launchGemv(const TargetHooks::Gemv &gemv, const Buf &x, const Buf &w, const Buf &y,
                          bool lastRow, StringRef what) {
  if (gemv.everyRow) {
    launch(gemv.kernel, {x, w, y}, {"tokens:0", "part", "parts"}, gemv.work, what);
    return;
  }
  launch(gemv.kernel, {x, w, y},
         {lastRow ? "tokens:-1" : "const:0", lastRow ? "const:1" : "tokens:0", "part", "parts"},
         gemv.work, what);
}

LogicalResult Lowering::lower(LinearOp o, StringRef what) {
  // Computed already, beside the sibling product lowered before it.
  if (values.count(o.getResult()))
    return success();
  Value input = o.getInput(), weightValue = o.getWeight();
  auto wType = llvm::cast<RankedTensorType>(weightValue.getType());
  int64_t n = wType.getDimSize(0), k = wType.getDimSize(1);
  Buf x = act(input);
  Buf y = alloc({n}, b.getF32Type());
  values[o.getResult()] = y;
  // A router's logits pick experts: near ties must not flip on rounding.
  bool exact = isRouterLogits(o);
  if (auto matrix = hooks.matrixGemm(n, k, maxRows(), exact);
      matrix && wType.getElementType().isBF16()) {
    FailureOr<Buf> w = weight(weightValue, Transform::None);
    if (failed(w))
      return failure();
    launchMatrixGemm(*matrix, n, x, *w, y, what, input);
    return success();
  }
  std::optional<TargetHooks::TiledGemm> tiled = wType.getElementType().isBF16() && !exact
                                                    ? hooks.tiledGemm(n, k, decodeStep())
                                                    : std::nullopt;
  if (tiled) {
    // The tiled GEMM reads the weights in its layout and its copy of x.
    FailureOr<Buf> w = weight(weightValue, tiled->weights);
    if (failed(w))
      return failure();
    Buf xb = alloc({k}, b.getBF16Type());
    launch(tiled->cast, {x, xb}, {"const:0", "part", "parts"}, tiled->castWork, what);
    launch(tiled->kernel, {xb, *w, y}, {"tokens:0", "part", "parts"}, tiled->work, what);
    return success();
  }
  FailureOr<Buf> w = weight(weightValue, Transform::None);
  if (failed(w))
    return failure();
  if (LinearOp sibling = gemvSibling(o); sibling && !exact)
    if (std::optional<TargetHooks::Gemv> pair = hooks.gemvPair(n, k)) {
      FailureOr<Buf> w1 = weight(sibling.getWeight(), Transform::None);
      if (failed(w1))
        return failure();
      Buf y1 = alloc({n}, b.getF32Type());
      values[sibling.getResult()] = y1;
      std::string both = what.str();
      if (auto name = llvm::dyn_cast<NameLoc>(sibling.getLoc()))
        both += "+" + name.getName().str();
      launch(pair->kernel, {x, *w, *w1, y, y1}, {"const:0", "tokens:0", "part", "parts"},
             pair->work, both);
      return success();
    }
  launchGemv(hooks.gemv(n, k, maxRows(), /*splitRows=*/true), x, *w, y, /*lastRow=*/false, what);
  return success();
}

LinearOp Lowering::gemvSibling(LinearOp o) {
  Value input = o.getInput();
  for (Operation *user : input.getUsers()) {
    auto other = llvm::dyn_cast<LinearOp>(user);
    if (!other || other == o || other.getInput() != input || isRouterLogits(other) ||
        other.getWeight().getType() != o.getWeight().getType() ||
        other->getBlock() != o->getBlock() || !o->isBeforeInBlock(other) ||
        values.count(other.getResult()))
      continue;
    return other;
  }
  return {};
}

LogicalResult Lowering::lower(LogitsOp o, StringRef what) {
  auto head = llvm::cast<RankedTensorType>(o.getHead().getType());
  int64_t vocab = head.getDimSize(0), hidden = head.getDimSize(1);
  // A batched entry's every token is its conversation's last; a verify
  // entry wants every token's.
  bool last = o.getLastOnly() && !entrySequences && !entryEveryLogit;
  std::optional<TargetHooks::TiledGemm> tiled =
      head.getElementType().isBF16() ? hooks.tiledGemm(vocab, hidden, decodeStep()) : std::nullopt;
  FailureOr<Buf> w = weight(o.getHead(), tiled ? tiled->weights : Transform::None);
  if (failed(w))
    return failure();
  plan::DimAttr rowDim = last ? fixed(kTileRows) : rows();
  Buf x = act(o.getInput());
  Buf y = allocShape({rowDim, fixed(vocab)}, b.getF32Type());
  if (tiled) {
    Buf xb = allocShape({rowDim, fixed(hidden)}, b.getBF16Type());
    launch(tiled->cast, {x, xb}, {last ? "tokens:-1" : "const:0", "part", "parts"}, tiled->castWork,
           what);
    launch(tiled->kernel, {xb, *w, y}, {last ? "const:1" : "tokens:0", "part", "parts"},
           tiled->work, what);
  } else if (auto matrix = hooks.matrixGemm(vocab, hidden, maxRows(), false);
             !last && matrix && head.getElementType().isBF16()) {
    // Batched decode and prefill: every row, each weight load shared by the
    // tokens (tensor cores from a few dozen tokens).
    launchMatrixGemm(*matrix, vocab, x, *w, y, what);
  } else {
    launchGemv(hooks.gemv(vocab, hidden, last ? 1 : maxRows(), /*splitRows=*/false), x, *w, y, last,
               what);
  }
  // The rows the call returns: the last token's, or every token's.
  plan::DimAttr outRows = last ? fixed(1) : plan::DimAttr::get(ctx, 0, 1, 1);
  values[o.getResult()] = view(y, {outRows, fixed(vocab)});
  return success();
}

} // namespace kiln::kernels::lowering
