// The lowering of one rank's ops and of the entry points; what spans ranks is
// in LowerRanks.cpp, the state they share in Lowering.h.
#include "targets/common/LowerToPlan.h"

#include "dialects/kiln/CheckpointDType.h"
#include "targets/common/GroupedExperts.h"
#include "targets/common/Lowering.h"
#include "targets/common/WarpSnippets.h"

#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>

using namespace mlir;

namespace kiln::kernels {
namespace {

// Entry points of at most kGemvTokens tokens (batched decode) get GEMVs that
// share each weight load among their tokens: the block GEMV, or where k does
// not fit it a warp per row over kGemvGroup tokens at a time (4 f32 rows of a
// full-width activation, 128 KiB, stay in L1; 8 do not).
constexpr int64_t kGemvTokens = kBlockGemvTokens, kGemvGroup = 4;
// Below this many items an expert on average, a GPU expert stage runs as
// grouped warp GEMVs rather than tiles of 128 items (GroupedExperts.h).
constexpr int64_t kGroupedItemsPerExpert = 16;

// A block GEMV's launch: 8 warps per blockGemvRows() output rows.
Work blockGemvWork(int64_t n) {
  int64_t blocks = (n + blockGemvRows() - 1) / blockGemvRows();
  return Work{blocks * 8 * warp::kWarp, 0, 8 * warp::kWarp};
}

// How many splits of the visible keys a GPU attention launch gets: decode
// needs them to spread one query over the machine (about 64 keys a split for
// a sliding window, 64 splits for global layers, whose length is only known
// at run time); prefill has warps enough from its tokens.
int64_t attentionSplits(int64_t window, int64_t maxTokens) {
  int64_t splits = window ? std::clamp<int64_t>((window + 63) / 64, 1, 64) : 64;
  return maxTokens > 1 ? std::min<int64_t>(splits, 4) : splits;
}

} // namespace

namespace lowering {

void Lowering::launch(const KernelSpec &kernel, ArrayRef<Buf> buffers, ArrayRef<StringRef> scalars,
                      Work work, StringRef what) {
  if (kernelIndex.try_emplace(kernel.name, model.kernels.size()).second)
    model.kernels.push_back(kernel);
  SmallVector<Value> operands;
  for (const Buf &buffer : buffers)
    operands.push_back(buffer.value);
  LaunchShape shape = hooks.shape(work, maxRows());
  SmallVector<Attribute> scalarAttrs;
  for (StringRef s : scalars) {
    if (shape.gridBlocks && (s == "part" || s == "parts")) // GPU threads know their part
      continue;
    // A whole-sequence op of a split entry counts split * T rows.
    if (rowScale > 1 && s.starts_with("tokens:"))
      scalarAttrs.push_back(b.getStringAttr("seq:" + s.drop_front(7).str()));
    else
      scalarAttrs.push_back(b.getStringAttr(s));
  }
  plan::DimAttr grid;
  IntegerAttr block;
  if (shape.gridBlocks) {
    grid = plan::DimAttr::get(ctx, shape.gridBlocks->constant,
                              shape.gridBlocks->perToken * rowScale, 1);
    block = b.getI64IntegerAttr(shape.blockThreads);
  }
  plan::LaunchOp::create(b, loc, FlatSymbolRefAttr::get(ctx, kernel.name), operands,
                         b.getArrayAttr(scalarAttrs), b.getI64IntegerAttr(shape.maxParts),
                         b.getStringAttr(what), grid, block);
}

FailureOr<Buf> Lowering::weight(Value v, Transform transform) {
  // A rank's piece of a weight: shard.all_slice of a kiln.weight.
  auto slice = v.getDefiningOp<shard::AllSliceOp>();
  auto w = (slice ? slice.getInput() : v).getDefiningOp<WeightOp>();
  if (!w)
    return emitError(v.getLoc()) << "targets read weights straight from kiln.weight (or a "
                                    "shard.all_slice of one)";
  if (auto it = bound.find(v); it != bound.end())
    return it->second;
  RankedTensorType full = w.getResult().getType();
  RankedTensorType type = llvm::cast<RankedTensorType>(v.getType());
  WeightInfo info;
  info.name = w.getName().str();
  info.stack = w.isExpertStack() ? type.getDimSize(0) : 0;
  ArrayRef<int64_t> one = info.stack ? full.getShape().drop_front() : full.getShape();
  info.shape.assign(one.begin(), one.end());
  if (slice) {
    FailureOr<int64_t> group = commGroup(slice, slice.getGridAttr(), slice.getGridAxes());
    if (failed(group))
      return failure();
    info.sliceGroup = *group;
    int64_t axis = slice.getSliceAxis().getSExtValue();
    if (!(info.stack && axis == 0)) { // a stack's axis 0 is its experts: a block of them
      info.sliceDim = axis - (info.stack ? 1 : 0);
      info.sliceCount = groups.all()[*group].size;
    }
  }
  std::optional<DType> dtype = checkpointDType(type.getElementType());
  if (!dtype)
    return w.emitOpError() << "has an element type the runtime cannot bind";
  info.dtype = *dtype;
  info.transform = transform;
  int64_t elements = type.getNumElements();
  info.bytes = elements * dtypeSize(info.dtype);

  std::string key = info.name + (transform == Transform::VnniBf16 ? "#vnni" : "") +
                    (slice ? "#slice" + std::to_string(info.sliceDim) : "");
  auto [it, inserted] = weightIndex.try_emplace(key, model.weights.size());
  if (inserted)
    model.weights.push_back(info);

  // Kernels see bytes as i8 (NVFP4 codes and E4M3 scales), VNNI blocks as
  // [blocks * 16, 32] bf16.
  Type elem = type.getElementType();
  if (info.dtype == DType::U8 || info.dtype == DType::F8_E4M3)
    elem = b.getIntegerType(8);
  SmallVector<plan::DimAttr> dims;
  if (transform == Transform::VnniBf16) {
    dims = {fixed(type.getDimSize(0) * type.getDimSize(1) / 32), fixed(32)};
  } else {
    for (int64_t d : type.getShape())
      dims.push_back(fixed(d));
  }
  Buf buffer = binding("weight", it->second, dims, elem);
  bound[v] = buffer;
  return buffer;
}

void Lowering::launchMatrixGemm(const TargetHooks::MatrixGemm &gemm, int64_t n, const Buf &x,
                                const Buf &w, const Buf &y, StringRef what) {
  Buf in = x;
  if (gemm.cast) {
    in = allocShape({rows(), x.shape.back()}, b.getBF16Type());
    launch(*gemm.cast, {x, in}, {"tokens:0", "part", "parts"}, gemm.castWork, what);
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

bool Lowering::launchFewTokensGemv(int64_t n, int64_t k, const Buf &x, const Buf &w, const Buf &y,
                                   StringRef what) {
  if (!hooks.isGpu() || maxRows() < 2 || maxRows() > kGemvTokens)
    return false;
  if (blockGemvFits(k, maxRows()))
    launch(linearBlockTokens(n, k, maxRows()), {x, w, y}, {"tokens:0", "part", "parts"},
           blockGemvWork(n), what);
  else if (warpGemvFits(k))
    launch(linearWarpTokens(n, k, std::min(maxRows(), kGemvGroup)), {x, w, y},
           {"tokens:0", "part", "parts"}, Work{warp::kWarp * n, 0}, what);
  else
    return false;
  return true;
}

LogicalResult Lowering::lowerLinear(Value input, Value weightValue, Value result, StringRef what) {
  auto wType = llvm::cast<RankedTensorType>(weightValue.getType());
  int64_t n = wType.getDimSize(0), k = wType.getDimSize(1);
  Buf x = act(input);
  Buf y = alloc({n}, b.getF32Type());
  values[result] = y;
  // A router's logits pick experts: near ties must not flip on rounding.
  auto linearOp = result.getDefiningOp<LinearOp>();
  bool exact = linearOp && isRouterLogits(linearOp);
  if (auto matrix = hooks.matrixGemm(n, k, maxRows(), exact);
      matrix && wType.getElementType().isBF16()) {
    FailureOr<Buf> w = weight(weightValue, Transform::None);
    if (failed(w))
      return failure();
    launchMatrixGemm(*matrix, n, x, *w, y, what);
    return success();
  }
  std::optional<TargetHooks::TiledGemm> tiled =
      wType.getElementType().isBF16() && !exact ? hooks.tiledGemm(n, k) : std::nullopt;
  if (tiled) {
    // The tiled GEMM reads a bf16 copy of the input and weights in VNNI
    // blocks.
    FailureOr<Buf> w = weight(weightValue, Transform::VnniBf16);
    if (failed(w))
      return failure();
    Buf xb = alloc({k}, b.getBF16Type());
    launch(castToBf16(k), {x, xb}, {"const:0", "part", "parts"}, Work{0, 1}, what);
    launch(tiled->kernel, {xb, *w, y}, {"tokens:0", "part", "parts"}, tiled->work, what);
    return success();
  }
  FailureOr<Buf> w = weight(weightValue, Transform::None);
  if (failed(w))
    return failure();
  if (hooks.isGpu() && splitGemvFits(n, k)) {
    launch(linearSplitBlock(n, k), {x, *w, y}, {"const:0", "tokens:0", "part", "parts"},
           Work{4 * warp::kWarp * n, 0, 4 * warp::kWarp}, what);
    return success();
  }
  if (launchFewTokensGemv(n, k, x, *w, y, what))
    return success();
  if (hooks.isGpu() && warpGemvFits(k))
    launch(linearWarp(n, k), {x, *w, y}, {"const:0", "tokens:0", "part", "parts"},
           Work{warp::kWarp * n, 0}, what);
  else
    launch(linearVector(n, k), {x, *w, y}, {"const:0", "tokens:0", "part", "parts"}, Work{n, 0},
           what);
  return success();
}

LogicalResult Lowering::lowerOp(Operation *op) {
  loc = op->getLoc();
  std::string what;
  if (auto name = llvm::dyn_cast<NameLoc>(loc))
    what = name.getName().str();
  else
    what = op->getName().getStringRef().str();
  // Whole sequence or this rank's share: as its activations are.
  rowScale = 1;
  for (Value operand : op->getOperands())
    if (auto it = values.find(operand); it != values.end() && !it->second.shape.empty())
      rowScale = std::max(rowScale, it->second.shape[0].getPerToken());
  auto width = [](Value v) { return llvm::cast<RankedTensorType>(v.getType()).getShape().back(); };
  auto dims3 = [&](Value v) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    return SmallVector<plan::DimAttr>{rows(), fixed(t.getDimSize(1)), fixed(t.getDimSize(2))};
  };
  Type f32 = b.getF32Type();
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](WeightOp) { return success(); }) // bound where used
      .Case([&](Nvfp4DequantOp o) -> LogicalResult {
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
        Buf y = allocShape(
            {fixed(out.getDimSize(0)), fixed(out.getDimSize(1)), fixed(out.getDimSize(2))},
            b.getBF16Type());
        launch(nvfp4Dequant(out.getDimSize(0), out.getDimSize(1), out.getDimSize(2)),
               {*packed, *scales, *global, y}, {"part", "parts"},
               Work{out.getDimSize(0) * out.getDimSize(1), 0}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](ExpertSwiGLUOp o) -> LogicalResult {
        auto gate = llvm::cast<RankedTensorType>(o.getGate().getType());
        int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
        SmallVector<Buf> args = {act(o.getInput()), act(o.getIndices())};
        for (Value stack : {o.getGate(), o.getUp(), o.getDown()}) {
          FailureOr<Buf> w = stackOf(stack);
          if (failed(w))
            return failure();
          args.push_back(*w);
        }
        Buf y = alloc({k, gate.getDimSize(2)}, f32);
        args.push_back(y);
        launch(expertSwiGLU(gate.getDimSize(0), k, gate.getDimSize(1), gate.getDimSize(2)), args,
               {"tokens:0", "part", "parts"}, Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](ExpertNormOp o) -> LogicalResult {
        auto w = llvm::cast<RankedTensorType>(o.getWeight().getType());
        int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
        FailureOr<Buf> weights = stackOf(o.getWeight());
        if (failed(weights))
          return failure();
        Buf y = alloc({k, w.getDimSize(1)}, f32);
        launch(expertNorm(w.getDimSize(0), k, w.getDimSize(1), o.getEps().convertToDouble()),
               {act(o.getInput()), act(o.getIndices()), *weights, y}, {"tokens:0", "part", "parts"},
               Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](CombineOp o) -> LogicalResult {
        auto in = llvm::cast<RankedTensorType>(o.getInput().getType());
        Buf y = alloc({in.getDimSize(2)}, f32);
        launch(combine(in.getDimSize(1), in.getDimSize(2)),
               {act(o.getInput()), act(o.getWeights()), y}, {"tokens:0", "part", "parts"},
               Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](EmbedOp o) -> LogicalResult {
        auto table = llvm::cast<RankedTensorType>(o.getTable().getType());
        FailureOr<Buf> t = weight(o.getTable(), Transform::None);
        if (failed(t))
          return failure();
        Buf y = alloc({table.getDimSize(1)}, f32);
        int64_t vocab = table.getDimSize(0), hidden = table.getDimSize(1);
        bool gpu = gpuRows(hidden);
        launch(gpu ? embedThreads(vocab, hidden) : embed(vocab, hidden), {*t, ids, y},
               {"tokens:0", "part", "parts"}, gpu ? Work{0, hidden / 4} : Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](RmsNormOp o) -> LogicalResult {
        FailureOr<Buf> w = weight(o.getWeight(), Transform::None);
        if (failed(w))
          return failure();
        Buf y = alloc({width(o.getInput())}, f32);
        int64_t n = width(o.getInput());
        double eps = o.getEps().convertToDouble();
        bool gpu = gpuRows(n);
        launch(gpu ? rmsNormBlock(n, eps) : rmsNorm(n, eps), {act(o.getInput()), *w, y},
               {"tokens:0", "part", "parts"}, gpu ? rowBlock(n) : Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](HeadNormOp o) -> LogicalResult {
        FailureOr<Buf> w = weight(o.getWeight(), Transform::None);
        if (failed(w))
          return failure();
        auto t = llvm::cast<RankedTensorType>(o.getInput().getType());
        Buf y = allocShape(dims3(o.getInput()), f32);
        int64_t heads = t.getDimSize(1), dim = t.getDimSize(2);
        double eps = o.getEps().convertToDouble();
        bool gpu = gpuRows(dim);
        launch(gpu ? headNormWarp(heads, dim, eps) : headNorm(heads, dim, eps),
               {act(o.getInput()), *w, y}, {"tokens:0", "part", "parts"},
               gpu ? Work{0, warp::kWarp * heads} : Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case<MulOp, AddOp>([&](auto o) -> LogicalResult {
        auto rhsType = llvm::cast<RankedTensorType>(o.getRhs().getType());
        bool vectorRhs = rhsType.getRank() == 1;
        bool weightRhs = bool(o.getRhs().template getDefiningOp<WeightOp>());
        Buf rhs;
        if (weightRhs) {
          FailureOr<Buf> w = weight(o.getRhs(), Transform::None);
          if (failed(w))
            return failure();
          rhs = *w;
        } else {
          rhs = act(o.getRhs());
        }
        if (!weightRhs && vectorRhs)
          return o.emitOpError() << "broadcasts an activation vector; kernels broadcast only "
                                    "weights";
        std::string kind = llvm::isa<MulOp>(o.getOperation()) ? "mul" : "add";
        Buf y = alloc({width(o.getLhs())}, f32);
        launch(binary(kind, width(o.getLhs()), weightRhs, vectorRhs), {act(o.getLhs()), rhs, y},
               {"tokens:0", "part", "parts"}, Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case(
          [&](LinearOp o) { return lowerLinear(o.getInput(), o.getWeight(), o.getResult(), what); })
      .Case([&](SplitHeadsOp o) -> LogicalResult {
        values[o.getResult()] = view(act(o.getInput()), dims3(o.getResult()));
        return success();
      })
      .Case([&](MergeHeadsOp o) -> LogicalResult {
        values[o.getResult()] = view(act(o.getInput()), {rows(), fixed(width(o.getResult()))});
        return success();
      })
      .Case([&](RopeOp o) -> LogicalResult {
        auto t = llvm::cast<RankedTensorType>(o.getInput().getType());
        Buf y = allocShape(dims3(o.getInput()), f32);
        int64_t heads = t.getDimSize(1), dim = t.getDimSize(2);
        double theta = o.getTheta().convertToDouble();
        bool gpu = gpuRows(dim);
        launch(gpu ? ropeWarp(heads, dim, theta) : rope(heads, dim, theta),
               {act(o.getInput()), positions, y}, {"tokens:0", "part", "parts"},
               gpu ? Work{0, warp::kWarp * heads} : Work{0, 1}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](AttentionOp o) -> LogicalResult {
        auto q = llvm::cast<RankedTensorType>(o.getQ().getType());
        auto k = llvm::cast<RankedTensorType>(o.getK().getType());
        int64_t window = o.getWindow().value_or(0);
        int64_t cache = attentionLayer++;
        if (static_cast<int64_t>(model.kvCaches.size()) <= cache)
          model.kvCaches.push_back({cache, window, k.getDimSize(1), k.getDimSize(2)});
        SmallVector<plan::DimAttr> cacheDims = {fixed(1), fixed(k.getDimSize(1)),
                                                fixed(k.getDimSize(2))};
        Buf kc = binding("kv", 2 * cache, cacheDims, f32);
        Buf vc = binding("kv", 2 * cache + 1, cacheDims, f32);
        Buf y = allocShape(dims3(o.getResult()), f32);
        int64_t qHeads = q.getDimSize(1), kvHeads = k.getDimSize(1), dim = q.getDimSize(2);
        if (hooks.isGpu() && warpAttentionFits(dim)) {
          // A batched entry's tokens each decode one conversation: split like decode.
          int64_t splits = attentionSplits(window, entrySequences ? 1 : maxRows());
          Buf partial = alloc({qHeads, splits, dim + 4}, f32);
          SmallVector<Buf> split = {act(o.getQ()), act(o.getK()), act(o.getV()), kc, vc};
          SmallVector<Buf> append = {act(o.getK()), act(o.getV()), kc, vc};
          if (entrySequences) {
            split.push_back(positions);
            append.push_back(positions);
          }
          split.push_back(partial);
          launch(attentionSplitWarp(qHeads, kvHeads, dim, window, o.getScale().convertToDouble(),
                                    splits, entrySequences),
                 split, {"tokens:0", "past:0", "part", "parts"},
                 Work{0, warp::kWarp * qHeads / attentionHeadsPerWarp(qHeads, kvHeads) * splits},
                 what);
          launch(attentionMergeWarp(qHeads, dim, splits), {partial, y},
                 {"tokens:0", "part", "parts"}, Work{0, warp::kWarp * qHeads}, what);
          launch(kvAppendWarp(kvHeads, dim, entrySequences), append,
                 {"tokens:0", "past:0", "part", "parts"}, Work{0, warp::kWarp * kvHeads}, what);
          values[o.getResult()] = y;
          return success();
        }
        SmallVector<Buf> args = {act(o.getQ()), act(o.getK()), act(o.getV()), kc, vc};
        if (entrySequences)
          args.push_back(positions);
        args.push_back(y);
        launch(attention(q.getDimSize(1), k.getDimSize(1), q.getDimSize(2), window,
                         o.getScale().convertToDouble(), entrySequences),
               args, {"tokens:0", "past:0", "part", "parts"}, Work{k.getDimSize(1), 0}, what);
        values[o.getResult()] = y;
        return success();
      })
      .Case([&](NormResidualOp o) -> LogicalResult {
        FailureOr<Buf> post = weight(o.getPostWeight(), Transform::None);
        FailureOr<Buf> gate = weight(o.getGate(), Transform::None);
        FailureOr<Buf> next = weight(o.getNextWeight(), Transform::None);
        if (failed(post) || failed(gate) || failed(next))
          return failure();
        int64_t w = width(o.getResidual());
        Buf h = alloc({w}, f32), y = alloc({w}, f32);
        double postEps = o.getPostEps().convertToDouble(),
               nextEps = o.getNextEps().convertToDouble();
        bool gpu = gpuRows(w);
        launch(gpu ? normResidualBlock(w, postEps, nextEps) : normResidual(w, postEps, nextEps),
               {act(o.getResidual()), act(o.getUpdate()), *post, *gate, *next, h, y},
               {"tokens:0", "part", "parts"}, gpu ? rowBlock(w) : Work{0, 1}, what);
        values[o.getNewResidual()] = h;
        values[o.getNormed()] = y;
        return success();
      })
      .Case([&](RouterTopKOp o) -> LogicalResult {
        auto logits = llvm::cast<RankedTensorType>(o.getLogits().getType());
        int64_t k = o.getK();
        Buf w = alloc({k}, f32), idx = alloc({k}, b.getI32Type());
        int64_t experts = logits.getDimSize(1);
        bool gpu = hooks.isGpu() && routerWarpFits(experts);
        launch(gpu ? routerTopKWarp(experts, k) : routerTopK(experts, k),
               {act(o.getLogits()), w, idx}, {"tokens:0", "part", "parts"},
               gpu ? Work{0, warp::kWarp} : Work{0, 1}, what);
        values[o.getWeights()] = w;
        values[o.getIndices()] = idx;
        return success();
      })
      .Case([&](MegaMoEOp o) { return lowerMegaMoE(o, what); })
      .Case<shard::AllSliceOp, shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            LocalExpertsOp>([&](Operation *o) { return lowerShardOp(o, what); })
      .Case([&](LogitsOp o) -> LogicalResult {
        auto head = llvm::cast<RankedTensorType>(o.getHead().getType());
        int64_t vocab = head.getDimSize(0), hidden = head.getDimSize(1);
        // A batched entry's every token is its conversation's last.
        bool last = o.getLastOnly() && !entrySequences;
        std::optional<TargetHooks::TiledGemm> tiled =
            head.getElementType().isBF16() ? hooks.tiledGemm(vocab, hidden) : std::nullopt;
        FailureOr<Buf> w = weight(o.getHead(), tiled ? Transform::VnniBf16 : Transform::None);
        if (failed(w))
          return failure();
        plan::DimAttr rowDim = last ? fixed(kTileRows) : rows();
        Buf y = allocShape({rowDim, fixed(vocab)}, f32);
        auto launchHead = [&] {
          if (tiled) {
            Buf xb = allocShape({rowDim, fixed(hidden)}, b.getBF16Type());
            launch(castToBf16(hidden), {act(o.getInput()), xb},
                   {last ? "tokens:-1" : "const:0", "part", "parts"}, Work{0, 1}, what);
            launch(tiled->kernel, {xb, *w, y}, {last ? "const:1" : "tokens:0", "part", "parts"},
                   tiled->work, what);
            return;
          }
          // Batched decode: every row, each weight load shared by the tokens
          // (tensor cores from a few dozen tokens).
          if (auto matrix = hooks.matrixGemm(vocab, hidden, maxRows(), false);
              !last && matrix && head.getElementType().isBF16()) {
            launchMatrixGemm(*matrix, vocab, act(o.getInput()), *w, y, what);
            return;
          }
          if (!last && launchFewTokensGemv(vocab, hidden, act(o.getInput()), *w, y, what))
            return;
          if (hooks.isGpu() && warpGemvFits(hidden))
            launch(linearWarp(vocab, hidden), {act(o.getInput()), *w, y},
                   {last ? "tokens:-1" : "const:0", last ? "const:1" : "tokens:0", "part", "parts"},
                   Work{warp::kWarp * vocab, 0}, what);
          else
            launch(linearVector(vocab, hidden), {act(o.getInput()), *w, y},
                   {last ? "tokens:-1" : "const:0", last ? "const:1" : "tokens:0", "part", "parts"},
                   Work{vocab, 0}, what);
        };
        launchHead();
        // The rows the call returns: the last token's, or every token's.
        plan::DimAttr outRows = last ? fixed(1) : plan::DimAttr::get(ctx, 0, 1, 1);
        values[o.getResult()] = view(y, {outRows, fixed(vocab)});
        return success();
      })
      .Case([&](func::ReturnOp ret) -> LogicalResult {
        // The logits (gathered, with a vocabulary-parallel head) go out.
        const Buf &logits = act(ret.getOperand(0));
        if (!logits.value)
          return ret.emitOpError() << "returns a value no kernel computed";
        Buf out = binding("output", 0, logits.shape, f32);
        plan::CopyOp::create(b, loc, logits.value, out.value);
        return success();
      })
      .Default([&](Operation *other) {
        return other->emitOpError()
               << "has no " << hooks.name() << " kernel (targets run single-rank graphs)";
      });
}

LogicalResult Lowering::lowerMegaMoE(MegaMoEOp o, StringRef what) {
  Type f32 = b.getF32Type();
  auto gate = llvm::cast<RankedTensorType>(o.getGate().getType());
  int64_t experts = gate.getDimSize(0), inter = gate.getDimSize(1), latent = gate.getDimSize(2);
  int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
  // Expert parallelism: this rank computes its own experts' share of
  // every token (the others' indices become -1, which the expert kernels
  // skip), then the expert group sums the shares. Where the group's ranks
  // hold different tokens (sequence parallelism), each first gathers the
  // group's tokens, their choices and weights, and the sum is scattered back
  // to the tokens' ranks: the dispatch and the combine.
  Buf input = act(o.getInput()), indices = act(o.getIndices()), weights = act(o.getWeights());
  std::optional<int64_t> expertGroup;
  bool dispatch = false;
  if (o.getGridAttr()) {
    FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), *o.getGridAxes());
    if (failed(group))
      return failure();
    expertGroup = *group;
    if (entrySplit > 1) {
      if (groups.all()[*group].size != entrySplit)
        return o.emitOpError() << "spans an expert group of " << groups.all()[*group].size
                               << " ranks while " << entrySplit
                               << " share the tokens: sequence parallelism with expert "
                                  "parallelism needs EP = TP";
      dispatch = true;
      input = gatherTokens(input, *group, what);
      indices = gatherTokens(indices, *group, what);
      weights = gatherTokens(weights, *group, what);
    }
  }
  auto finish = [&](const Buf &y) {
    values[o.getResult()] = dispatch ? scatterTokens(y, *expertGroup, what)
                            : expertGroup
                                ? collective("all_reduce", y, y.shape, *expertGroup, 0, what)
                                : y;
    return success();
  };
  SmallVector<Buf> args = {input, indices, weights};
  bool nvfp4 = bool(o.getGate().getDefiningOp<Nvfp4DequantOp>());
  SmallVector<SmallVector<Buf>> projections; // gate, up, down: 1 or 3 buffers each
  for (Value stack : {o.getGate(), o.getUp(), o.getDown()}) {
    projections.emplace_back();
    auto dequant = stack.getDefiningOp<Nvfp4DequantOp>();
    if (bool(dequant) != nvfp4)
      return o.emitOpError() << "mixes NVFP4 and BF16 expert projections";
    SmallVector<Value> parts =
        nvfp4 ? SmallVector<Value>{dequant.getPacked(), dequant.getScales(), dequant.getGlobal()}
              : SmallVector<Value>{stack};
    for (Value part : parts) {
      FailureOr<Buf> w = weight(part, Transform::None);
      if (failed(w))
        return failure();
      args.push_back(*w);
      projections.back().push_back(*w);
    }
  }
  FailureOr<Buf> pn = weight(o.getPostNorm(), Transform::None);
  if (failed(pn))
    return failure();
  args.push_back(*pn);
  Buf y = alloc({latent}, f32);
  double eps = o.getEps().convertToDouble();
  if (expertGroup && !dispatch && options.peerExchange) {
    // One persistent kernel that also combines across the group.
    int64_t members = groups.all()[*expertGroup].size;
    if (std::optional<TargetHooks::PeerMegaMoE> peer =
            hooks.peerMegaMoE({experts, k, inter, latent, eps, nvfp4, members, maxRows()})) {
      int64_t site = groups.reserveExchange(*expertGroup, peer->siteBytes);
      Buf table = binding("exchange", *expertGroup, {fixed(members)}, b.getI64Type());
      SmallVector<Buf> peerArgs = args;
      peerArgs.push_back(alloc({k, inter}, f32));
      peerArgs.push_back(alloc({k, latent / 4}, f32)); // sums of squares, 4 rows each
      peerArgs.push_back(view(table, table.shape, site));
      peerArgs.push_back(y);
      launch(peer->kernel, peerArgs,
             {"tokens:0", "group:" + std::to_string(*expertGroup), "part", "parts"}, peer->work,
             what);
      values[o.getResult()] = y;
      return success();
    }
  }
  if (expertGroup) {
    // This rank's experts renumbered from 0, the others' -1.
    Buf local = alloc({k}, b.getI32Type());
    launch(localExperts(k, experts), {indices, local},
           {"tokens:0", ("group:" + std::to_string(*expertGroup)), "part", "parts"}, Work{0, 1},
           what);
    indices = local;
    args[1] = local;
  }
  // Batched decode spreads a few items over each expert: the tile kernels'
  // 128-item tiles would be mostly empty, so the grouped warp kernels take
  // entries that average fewer than kGroupedItemsPerExpert items an expert
  // (over all ranks' experts: each rank lists only its own).
  int64_t members = expertGroup ? groups.all()[*expertGroup].size : 1;
  ExpertTileShape listShape{experts, k, inter, latent, nvfp4, maxRows()};
  bool grouped = hooks.isGpu() && maxRows() > 1 && groupedExpertsFit(listShape) &&
                 maxRows() * k < kGroupedItemsPerExpert * experts * members;
  // The stage over lists of items by expert: grouped warps, or the target's
  // tiles.
  std::optional<TargetHooks::MatrixExperts> listed =
      grouped         ? std::optional(groupedExperts(listShape))
      : maxRows() > 1 ? hooks.matrixExperts(experts, k, inter, latent, nvfp4, maxRows())
                      : std::nullopt;
  if (listed || (hooks.isGpu() && warpMoEFits(inter, latent))) {
    Buf h = alloc({k, inter}, f32), yk = alloc({k, latent}, f32);
    if (listed) {
      // Items grouped by expert, then tiles of an expert's items (prefill)
      // or warps over an expert's rows (batched decode).
      Type i32 = b.getI32Type();
      Buf meta = allocShape({fixed(listed->metaWords)}, i32);
      Buf tiles = allocShape({fixed(listed->tileWords)}, i32);
      Buf items = allocShape({fixed(listed->itemWords)}, i32);
      launch(listed->lists, {indices, meta, tiles, items}, {"tokens:0", "part", "parts"},
             listed->listsWork, what);
      SmallVector<Buf> up = {input, meta, tiles, items};
      up.append(projections[0]);
      up.append(projections[1]);
      up.push_back(h);
      launch(listed->gateUp, up, {"part", "parts"}, listed->gateUpWork, what);
      SmallVector<Buf> down = {h, meta, tiles, items};
      down.append(projections[2]);
      down.push_back(yk);
      launch(listed->down, down, {"part", "parts"}, listed->downWork, what);
    } else {
      // Decode: the products spread over warps, a few rows each.
      SmallVector<Buf> up = {input, indices};
      up.append(projections[0]);
      up.append(projections[1]);
      up.push_back(h);
      launch(expertGateUpWarp(experts, k, inter, latent, nvfp4), up, {"tokens:0", "part", "parts"},
             Work{0, warp::kWarp * k * inter / 2}, what);
      SmallVector<Buf> down = {h, indices};
      down.append(projections[2]);
      down.push_back(yk);
      launch(expertDownWarp(experts, k, inter, latent, nvfp4), down, {"tokens:0", "part", "parts"},
             Work{0, warp::kWarp * k * latent / 4}, what);
    }
    Buf scales = alloc({k}, f32);
    int64_t threads = rowBlockThreads(latent);
    launch(expertScalesBlock(k, latent, eps), {yk, weights, scales}, {"tokens:0", "part", "parts"},
           Work{0, k * threads, threads}, what);
    launch(expertCombineThreads(experts, k, latent), {yk, indices, scales, *pn, y},
           {"tokens:0", "part", "parts"}, Work{0, latent / 4}, what);
    return finish(y);
  }
  args.push_back(y);
  launch(megaMoE(experts, k, inter, latent, eps, nvfp4), args, {"tokens:0", "part", "parts"},
         Work{0, 1}, what);
  return finish(y);
}

LogicalResult Lowering::lowerEntry(func::FuncOp forward, const EntryInfo &entry) {
  b.setInsertionPointToEnd(model.plan->getBody());
  auto op = plan::EntryOp::create(
      b, forward.getLoc(), b.getStringAttr(entry.name), b.getI64IntegerAttr(entry.maxTokens),
      entry.sequences ? b.getI64IntegerAttr(entry.sequences) : IntegerAttr(),
      entry.split > 1 ? b.getI64IntegerAttr(entry.split) : IntegerAttr(), IntegerAttr());
  op.getBody().emplaceBlock();
  b.setInsertionPointToStart(&op.getBody().front());
  entryMaxTokens = entry.maxTokens;
  entrySequences = entry.sequences;
  entrySplit = entry.split;
  rowScale = 1;
  values.clear();
  bound.clear();
  attentionLayer = 0;
  loc = forward.getLoc();
  // A split entry's inputs hold the whole sequence.
  ids = binding("input", 0, {exactRows(entrySplit)}, b.getI32Type());
  positions = binding("input", 1, {exactRows(entrySplit)}, b.getI32Type());
  values[forward.getArgument(0)] = ids;
  values[forward.getArgument(1)] = positions;
  for (Operation &inner : forward.getBody().front())
    if (failed(lowerOp(&inner)))
      return failure();
  return success();
}

FailureOr<LoweredModel> Lowering::run() {
  auto forward = graph.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.getNumArguments() != 2)
    return graph.emitError() << "targets lower a func.func @forward(ids, positions)";
  if (!llvm::cast<RankedTensorType>(forward.getArgument(0).getType()).isDynamicDim(0))
    return forward.emitOpError() << "must take a dynamic number of tokens to serve prefill "
                                    "and decode (build the graph with dynamic tokens)";
  auto logits = llvm::cast<RankedTensorType>(forward.getResultTypes()[0]);
  bool perToken = logits.isDynamicDim(0);
  if (auto layout = graph->getAttrOfType<DictionaryAttr>("kiln.layout"))
    for (StringRef key : {"tp", "ep"})
      if (auto n = layout.getAs<IntegerAttr>(key))
        world = std::max(world, n.getInt());
  model.plan = ModuleOp::create(graph.getLoc());
  model.entries = {{"prefill", options.maxPrefillTokens, perToken}, {"decode", 1, perToken}};
  if (options.decodeBatch > 1)
    model.entries.push_back({"decode_batch", options.decodeBatch, true, options.decodeBatch});
  for (const EntryInfo &entry : model.entries)
    if (failed(lowerEntry(forward, entry)))
      return failure();
  if (options.spGraph) {
    // Each rank takes 1/split of a prefill chunk.
    ModuleOp spGraph = options.spGraph;
    auto spForward = spGraph.lookupSymbol<func::FuncOp>("forward");
    auto grid = spGraph.lookupSymbol<shard::GridOp>("tp");
    if (!spForward || !grid)
      return spGraph.emitError() << "the sequence-parallel graph needs @forward and the "
                                    "tp grid";
    EntryInfo sp{"prefill_sp", 1, false, 0, grid.getShape()[1] * grid.getShape()[2]};
    sp.maxTokens = std::max<int64_t>(1, options.maxPrefillTokens / sp.split);
    model.entries.push_back(sp);
    if (failed(lowerEntry(spForward, sp)))
      return failure();
  }
  // The kernels that synthesise `synthetic:SEED` weights on the device.
  for (const KernelSpec &kernel : {synthesizeBf16(), synthesizeNvfp4Amax(), synthesizeNvfp4Quant()})
    if (kernelIndex.try_emplace(kernel.name, model.kernels.size()).second)
      model.kernels.push_back(kernel);
  // GPUs choose greedy tokens where the logits are.
  if (hooks.isGpu())
    if (KernelSpec greedy = greedyKeys();
        kernelIndex.try_emplace(greedy.name, model.kernels.size()).second)
      model.kernels.push_back(std::move(greedy));
  model.commGroups = groups.all();
  SmallVector<Attribute> groupAttrs;
  for (const CommGroupInfo &group : model.commGroups)
    groupAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("name", b.getStringAttr(group.name)),
         b.getNamedAttr("size", b.getI64IntegerAttr(group.size)),
         b.getNamedAttr("ranks", b.getDenseI64ArrayAttr(group.ranks)),
         b.getNamedAttr("exchange_bytes", b.getI64IntegerAttr(group.exchangeBytes))}));
  if (!groupAttrs.empty())
    model.plan.get()->setAttr("plan.comm_groups", b.getArrayAttr(groupAttrs));
  return std::move(model);
}

} // namespace lowering

FailureOr<LoweredModel> lowerToPlan(ModuleOp graph, const LowerOptions &options,
                                    const TargetHooks &hooks) {
  return lowering::Lowering(graph, options, hooks).run();
}

} // namespace kiln::kernels
