// The lowering of one rank's ops, one function each: buffers for its results
// and the launches of the kernels the target chose (TargetHooks). The linear
// products are in LowerLinear.cpp, the MegaMoE stage in LowerMegaMoE.cpp, what
// spans ranks in LowerRanks.cpp.
#include "targets/common/Lowering.h"

namespace kiln::kernels::lowering {

LogicalResult Lowering::lower(Nvfp4DequantOp o, StringRef what) {
  // Inside kiln.megamoe the kernel decodes the codes itself.
  if (llvm::all_of(o->getUsers(), [](Operation *u) { return llvm::isa<MegaMoEOp>(u); }))
    return success();
  auto out = llvm::cast<RankedTensorType>(o.getResult().getType());
  if (out.getRank() != 3 || !out.getElementType().isBF16())
    return o.emitOpError() << "decodes into " << out
                           << ": the decode kernel writes stacks of matrices in bf16";
  FailureOr<Buf> packed = weight(o.getPacked(), Transform::None);
  FailureOr<Buf> scales = weight(o.getScales(), Transform::None);
  FailureOr<Buf> global = weight(o.getGlobal(), Transform::None);
  if (failed(packed) || failed(scales) || failed(global))
    return failure();
  Buf y = allocShape({fixed(out.getDimSize(0)), fixed(out.getDimSize(1)), fixed(out.getDimSize(2))},
                     b.getBF16Type());
  launch(nvfp4Dequant(out.getDimSize(0), out.getDimSize(1), out.getDimSize(2)),
         {*packed, *scales, *global, y}, {"part", "parts"},
         Work{out.getDimSize(0) * out.getDimSize(1), 0}, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(ExpertSwiGLUOp o, StringRef what) {
  auto gate = llvm::cast<RankedTensorType>(o.getGate().getType());
  int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
  SmallVector<Buf> args = {act(o.getInput()), act(o.getIndices())};
  for (Value stack : {o.getGate(), o.getUp(), o.getDown()}) {
    FailureOr<Buf> w = stackOf(stack);
    if (failed(w))
      return failure();
    args.push_back(*w);
  }
  Buf y = alloc({k, gate.getDimSize(2)}, b.getF32Type());
  args.push_back(y);
  launch(expertSwiGLU(gate.getDimSize(0), k, gate.getDimSize(1), gate.getDimSize(2)), args,
         {"tokens:0", "part", "parts"}, Work{0, 1}, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(ExpertNormOp o, StringRef what) {
  auto w = llvm::cast<RankedTensorType>(o.getWeight().getType());
  int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
  FailureOr<Buf> weights = stackOf(o.getWeight());
  if (failed(weights))
    return failure();
  Buf y = alloc({k, w.getDimSize(1)}, b.getF32Type());
  launch(expertNorm(w.getDimSize(0), k, w.getDimSize(1), o.getEps().convertToDouble()),
         {act(o.getInput()), act(o.getIndices()), *weights, y}, {"tokens:0", "part", "parts"},
         Work{0, 1}, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(CombineOp o, StringRef what) {
  auto in = llvm::cast<RankedTensorType>(o.getInput().getType());
  Buf y = alloc({in.getDimSize(2)}, b.getF32Type());
  launch(combine(in.getDimSize(1), in.getDimSize(2)), {act(o.getInput()), act(o.getWeights()), y},
         {"tokens:0", "part", "parts"}, Work{0, 1}, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(EmbedOp o, StringRef what) {
  auto table = llvm::cast<RankedTensorType>(o.getTable().getType());
  FailureOr<Buf> t = weight(o.getTable(), Transform::None);
  if (failed(t))
    return failure();
  int64_t vocab = table.getDimSize(0), hidden = table.getDimSize(1);
  Buf y = alloc({hidden}, b.getF32Type());
  KernelLaunch kernel = hooks.embedKernel(vocab, hidden);
  launch(kernel.kernel, {*t, ids, y}, {"tokens:0", "part", "parts"}, kernel.work, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(RmsNormOp o, StringRef what) {
  FailureOr<Buf> w = weight(o.getWeight(), Transform::None);
  if (failed(w))
    return failure();
  int64_t n = width(o.getInput());
  Buf y = alloc({n}, b.getF32Type());
  const double eps = o.getEps().convertToDouble();
  values[o.getResult()] = y;
  // A matrix GEMM that would cast the result to bf16 finds the norm's copy.
  if (launchNormWithBf16Copy(
          o.getResult(), n, [&] { return hooks.rmsNormKernelWithBf16(n, eps); },
          {act(o.getInput()), *w, y}, what))
    return success();
  KernelLaunch kernel = hooks.rmsNormKernel(n, eps);
  launch(kernel.kernel, {act(o.getInput()), *w, y}, {"tokens:0", "part", "parts"}, kernel.work,
         what);
  return success();
}

void Lowering::launchHeadRows(const KernelLaunch &kernel, Value input, ArrayRef<Buf> extra,
                              Value result, StringRef what) {
  Buf y = allocShape(headRows(input), b.getF32Type());
  SmallVector<Buf> buffers = {act(input)};
  buffers.append(extra.begin(), extra.end());
  buffers.push_back(y);
  launch(kernel.kernel, buffers, {"tokens:0", "part", "parts"}, kernel.work, what);
  values[result] = y;
}

LogicalResult Lowering::lower(HeadNormOp o, StringRef what) {
  FailureOr<Buf> w = weight(o.getWeight(), Transform::None);
  if (failed(w))
    return failure();
  auto t = llvm::cast<RankedTensorType>(o.getInput().getType());
  launchHeadRows(
      hooks.headNormKernel(t.getDimSize(1), t.getDimSize(2), o.getEps().convertToDouble()),
      o.getInput(), {*w}, o.getResult(), what);
  return success();
}

LogicalResult Lowering::lowerBinary(Operation *op, StringRef kind, StringRef what) {
  Value lhs = op->getOperand(0), rhsValue = op->getOperand(1);
  bool vectorRhs = llvm::cast<RankedTensorType>(rhsValue.getType()).getRank() == 1;
  bool weightRhs = bool(rhsValue.getDefiningOp<WeightOp>());
  Buf rhs;
  if (weightRhs) {
    FailureOr<Buf> w = weight(rhsValue, Transform::None);
    if (failed(w))
      return failure();
    rhs = *w;
  } else {
    rhs = act(rhsValue);
  }
  if (!weightRhs && vectorRhs)
    return op->emitOpError() << "broadcasts an activation vector; kernels broadcast only "
                                "weights";
  Buf y = alloc({width(lhs)}, b.getF32Type());
  launch(binary(kind.str(), width(lhs), weightRhs, vectorRhs), {act(lhs), rhs, y},
         {"tokens:0", "part", "parts"}, Work{0, 1}, what);
  values[op->getResult(0)] = y;
  return success();
}

LogicalResult Lowering::lower(SplitHeadsOp o, StringRef) {
  values[o.getResult()] = view(act(o.getInput()), headRows(o.getResult()));
  return success();
}

LogicalResult Lowering::lower(MergeHeadsOp o, StringRef) {
  Buf merged = view(act(o.getInput()), {rows(), fixed(width(o.getResult()))});
  values[o.getResult()] = merged;
  // Heads the attention kernel wrote as bf16 (castingGemmReads): the copy
  // the GEMM reading them would have cast.
  if (merged.elem.isBF16())
    if (std::optional<Bf16CopyKey> copy = pendingBf16Copy(o.getResult()))
      bf16Copies[*copy] = merged;
  return success();
}

bool Lowering::castingGemmReads(Value heads) {
  if (!heads.hasOneUse())
    return false;
  auto merge = llvm::dyn_cast<MergeHeadsOp>(*heads.getUsers().begin());
  return merge && merge.getResult().hasOneUse() && pendingBf16Copy(merge.getResult());
}

LogicalResult Lowering::lower(RopeOp o, StringRef what) {
  auto t = llvm::cast<RankedTensorType>(o.getInput().getType());
  launchHeadRows(hooks.ropeKernel(t.getDimSize(1), t.getDimSize(2), o.getTheta().convertToDouble()),
                 o.getInput(), {positions}, o.getResult(), what);
  return success();
}

LogicalResult Lowering::lower(HeadNormRopeOp o, StringRef what) {
  FailureOr<Buf> w = weight(o.getWeight(), Transform::None);
  if (failed(w))
    return failure();
  auto t = llvm::cast<RankedTensorType>(o.getInput().getType());
  launchHeadRows(hooks.headNormRopeKernel(t.getDimSize(1), t.getDimSize(2),
                                          o.getEps().convertToDouble(),
                                          o.getTheta().convertToDouble()),
                 o.getInput(), {*w, positions}, o.getResult(), what);
  return success();
}

LogicalResult Lowering::lower(AttentionOp o, StringRef what) {
  Type f32 = b.getF32Type();
  auto q = llvm::cast<RankedTensorType>(o.getQ().getType());
  auto k = llvm::cast<RankedTensorType>(o.getK().getType());
  int64_t window = o.getWindow().value_or(0);
  int64_t cache = attentionLayer++;
  // The cache's element type: kv_type (f32 without one).
  std::optional<Type> kvType = o.getKvType();
  Type cacheType = kvType ? *kvType : f32;
  const bool fp8 = llvm::isa<Float8E4M3FNType>(cacheType);
  DType cacheDType = cacheType.isBF16() ? DType::BF16 : fp8 ? DType::F8_E4M3 : DType::F32;
  const int64_t pageTokens = window ? 0 : options.kvPageTokens;
  if (static_cast<int64_t>(model.kvCaches.size()) <= cache)
    model.kvCaches.push_back({cache, window, k.getDimSize(1), k.getDimSize(2), cacheDType,
                              window ? window + std::max<int64_t>(0, options.verifyTokens - 1) : 0,
                              pageTokens});
  SmallVector<plan::DimAttr> cacheDims = {fixed(1), fixed(k.getDimSize(1)), fixed(k.getDimSize(2))};
  Buf kc = binding("kv", 2 * cache, cacheDims, cacheType);
  Buf vc = binding("kv", 2 * cache + 1, cacheDims, cacheType);
  int64_t qHeads = q.getDimSize(1), kvHeads = k.getDimSize(1), dim = q.getDimSize(2);
  AttentionShape shape{qHeads,
                       kvHeads,
                       dim,
                       window,
                       o.getScale().convertToDouble(),
                       cacheType.isBF16() ? KvElement::BF16
                       : fp8              ? KvElement::FP8
                                          : KvElement::F32,
                       pageTokens};
  if (std::optional<ArrayRef<double>> scales = o.getKvScales()) {
    shape.keyScale = (*scales)[0];
    shape.valueScale = (*scales)[1];
  }
  // A paged cache's kernels take the page table after their other buffers.
  auto withPages = [&](SmallVector<Buf> buffers) {
    if (shape.paged())
      buffers.push_back(pageTable);
    return buffers;
  };
  // Prefill-sized entries: one kernel over query and key tiles, then the
  // append of the new K/V; y as bf16 where the target's kernel writes it so
  // and its one reader would cast it (the output projection on tensor cores).
  std::optional<TargetHooks::TileAttention> tiled =
      entrySequences ? std::nullopt
                     : hooks.tileAttention(shape, maxRows(), castingGemmReads(o.getResult()));
  Buf y = allocShape(headRows(o.getResult()),
                     tiled && tiled->bf16Output ? Type(b.getBF16Type()) : Type(f32));
  if (tiled) {
    SmallVector<Buf> buffers = {act(o.getQ()), act(o.getK()), act(o.getV()), kc, vc, y};
    SmallVector<StringRef> scalars = {"tokens:0", "past:0", "part", "parts"};
    if (tiled->stage) {
      Type bf16 = b.getBF16Type();
      Buf keys = allocShape({fixed(kvHeads), fixed(tiled->stagedRows), fixed(dim)}, bf16);
      Buf values = allocShape({fixed(kvHeads), fixed(tiled->stagedRows), fixed(dim)}, bf16);
      launch(tiled->stage->kernel, {act(o.getK()), act(o.getV()), keys, values},
             {"tokens:0", "part", "parts"}, tiled->stage->work, what);
      buffers.append({keys, values});
      scalars.assign(tiled->attendScalars.begin(), tiled->attendScalars.end());
    }
    launch(tiled->attend.kernel, withPages(buffers), scalars, tiled->attend.work, what);
    launch(tiled->append.kernel, withPages({act(o.getK()), act(o.getV()), kc, vc}),
           {"tokens:0", "past:0", "part", "parts"}, tiled->append.work, what);
    values[o.getResult()] = y;
    return success();
  }
  // A batched entry's tokens each continue one conversation: split like
  // decode (or a verify call of a conversation's rows).
  if (std::optional<TargetHooks::SplitAttention> split = hooks.splitAttention(
          shape, entrySequences ? entrySequenceRows : maxRows(), entryLayout())) {
    Buf partial = alloc({qHeads, split->splits, dim + 4}, f32);
    SmallVector<Buf> partials = {act(o.getQ()), act(o.getK()), act(o.getV()), kc, vc};
    SmallVector<Buf> append = {act(o.getK()), act(o.getV()), kc, vc};
    if (entrySequences) {
      partials.push_back(positions);
      append.push_back(positions);
    }
    partials.push_back(partial);
    launch(split->partials.kernel, withPages(partials), {"tokens:0", "past:0", "part", "parts"},
           split->partials.work, what);
    launch(split->merge.kernel, {partial, y}, {"tokens:0", "part", "parts"}, split->merge.work,
           what);
    launch(split->append.kernel, withPages(append), {"tokens:0", "past:0", "part", "parts"},
           split->append.work, what);
    values[o.getResult()] = y;
    return success();
  }
  SmallVector<Buf> args = {act(o.getQ()), act(o.getK()), act(o.getV()), kc, vc};
  if (entrySequences)
    args.push_back(positions);
  args.push_back(y);
  launch(attention(shape, entryLayout()), withPages(args), {"tokens:0", "past:0", "part", "parts"},
         Work{kvHeads, 0}, what);
  values[o.getResult()] = y;
  return success();
}

LogicalResult Lowering::lower(NormResidualOp o, StringRef what) {
  FailureOr<Buf> post = weight(o.getPostWeight(), Transform::None);
  FailureOr<Buf> gate = weight(o.getGate(), Transform::None);
  FailureOr<Buf> next = weight(o.getNextWeight(), Transform::None);
  if (failed(post) || failed(gate) || failed(next))
    return failure();
  int64_t w = width(o.getResidual());
  Buf h = alloc({w}, b.getF32Type()), y = alloc({w}, b.getF32Type());
  const double postEps = o.getPostEps().convertToDouble();
  const double nextEps = o.getNextEps().convertToDouble();
  values[o.getNewResidual()] = h;
  values[o.getNormed()] = y;
  // A matrix GEMM that would cast `normed` to bf16 finds the kernel's copy.
  if (launchNormWithBf16Copy(
          o.getNormed(), w, [&] { return hooks.normResidualKernelWithBf16(w, postEps, nextEps); },
          {act(o.getResidual()), act(o.getUpdate()), *post, *gate, *next, h, y}, what))
    return success();
  KernelLaunch kernel = hooks.normResidualKernel(w, postEps, nextEps);
  launch(kernel.kernel, {act(o.getResidual()), act(o.getUpdate()), *post, *gate, *next, h, y},
         {"tokens:0", "part", "parts"}, kernel.work, what);
  return success();
}

LogicalResult Lowering::lower(RouterTopKOp o, StringRef what) {
  auto logits = llvm::cast<RankedTensorType>(o.getLogits().getType());
  int64_t k = o.getK();
  Buf w = alloc({k}, b.getF32Type()), idx = alloc({k}, b.getI32Type());
  KernelLaunch kernel = hooks.routerTopKKernel(logits.getDimSize(1), k);
  launch(kernel.kernel, {act(o.getLogits()), w, idx}, {"tokens:0", "part", "parts"}, kernel.work,
         what);
  values[o.getWeights()] = w;
  values[o.getIndices()] = idx;
  return success();
}

LogicalResult Lowering::lower(func::ReturnOp ret, StringRef) {
  // The logits (gathered, with a vocabulary-parallel head) go out.
  const Buf &logits = act(ret.getOperand(0));
  if (!logits.value)
    return ret.emitOpError() << "returns a value no kernel computed";
  Buf out = binding("output", 0, logits.shape, b.getF32Type());
  plan::CopyOp::create(b, loc, logits.value, out.value);
  return success();
}

} // namespace kiln::kernels::lowering
