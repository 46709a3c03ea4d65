// The lowering of a graph's entry points: each op to its lowering function
// (LowerOps.cpp, LowerLinear.cpp, LowerMegaMoE.cpp, LowerRanks.cpp), the
// launches, weight bindings and entries they share. Their state is in
// Lowering.h.
#include "targets/common/LowerToPlan.h"

#include "dialects/kiln/CheckpointDType.h"
#include "dialects/plan/PlanDialect.h"
#include "targets/common/Lowering.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/JSON.h"

#include <algorithm>

using namespace mlir;

namespace kiln::kernels {

namespace lowering {

// A kernel whose tiling names its block was built for that many threads:
// the launch the hooks shaped must give it exactly those (the tiling is
// written once, where the kernel is built; a launch that disagrees is a
// compiler bug, caught here rather than as wrong results on a GPU).
static void requireTilingBlock(const KernelSpec &kernel, int64_t blockThreads) {
  llvm::Expected<llvm::json::Value> tiling = llvm::json::parse(kernel.tiling);
  if (!tiling) {
    llvm::consumeError(tiling.takeError());
    return;
  }
  const llvm::json::Object *object = tiling->getAsObject();
  std::optional<int64_t> block = object ? object->getInteger("block") : std::nullopt;
  if (block && *block != blockThreads)
    llvm::report_fatal_error(llvm::Twine("kernel '") + kernel.name + "' is tiled for blocks of " +
                             llvm::Twine(*block) + " threads but launched with " +
                             llvm::Twine(blockThreads));
}

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
    requireTilingBlock(kernel, shape.blockThreads);
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
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](WeightOp) { return success(); }) // bound where used
      .Case<Nvfp4DequantOp, ExpertSwiGLUOp, ExpertNormOp, CombineOp, EmbedOp, RmsNormOp, HeadNormOp,
            LinearOp, SplitHeadsOp, MergeHeadsOp, RopeOp, HeadNormRopeOp, AttentionOp,
            NormResidualOp, RouterTopKOp, LogitsOp, func::ReturnOp>(
          [&](auto o) { return lower(o, what); })
      .Case([&](MulOp o) { return lowerBinary(o, "mul", what); })
      .Case([&](AddOp o) { return lowerBinary(o, "add", what); })
      .Case([&](MegaMoEOp o) { return lowerMegaMoE(o, what); })
      .Case<shard::AllSliceOp, shard::AllReduceOp, shard::AllGatherOp, shard::ReduceScatterOp,
            LocalExpertsOp>([&](Operation *o) { return lowerShardOp(o, what); })
      .Default([&](Operation *other) -> LogicalResult {
        if (llvm::isa_and_present<shard::ShardDialect>(other->getDialect()))
          return other->emitOpError()
                 << "is not lowered to the " << hooks.name()
                 << " plan: targets take the graph pipeline's SPMD graph, whose shard ops are "
                    "weight slices and collectives only";
        return other->emitOpError() << "is not lowered to the " << hooks.name()
                                    << " plan: no lowering function takes it (a new op needs a "
                                       "Lowering::lower in targets/common and its kernels)";
      });
}

LogicalResult Lowering::lowerEntry(func::FuncOp forward, const EntryInfo &entry) {
  b.setInsertionPointToEnd(model.plan->getBody());
  auto op = plan::EntryOp::create(
      b, forward.getLoc(), b.getStringAttr(entry.name), b.getI64IntegerAttr(entry.maxTokens),
      entry.sequences ? b.getI64IntegerAttr(entry.sequences) : IntegerAttr(),
      entry.split > 1 ? b.getI64IntegerAttr(entry.split) : IntegerAttr(), IntegerAttr(),
      entry.rowsPerSequence > 1 ? b.getI64IntegerAttr(entry.rowsPerSequence) : IntegerAttr());
  op.getBody().emplaceBlock();
  b.setInsertionPointToStart(&op.getBody().front());
  entryMaxTokens = entry.maxTokens;
  entrySequences = entry.sequences;
  entrySequenceRows = entry.rowsPerSequence;
  entryEveryLogit = entry.logitsPerToken;
  entrySplit = entry.split;
  rowScale = 1;
  values.clear();
  bound.clear();
  bf16Copies.clear();
  attentionLayer = 0;
  loc = forward.getLoc();
  // A split entry's inputs hold the whole sequence.
  ids = binding("input", 0, {exactRows(entrySplit)}, b.getI32Type());
  positions = binding("input", 1, {exactRows(entrySplit)}, b.getI32Type());
  values[forward.getArgument(0)] = ids;
  values[forward.getArgument(1)] = positions;
  // Its size is the runtime's (the conversations' pages); one entry here.
  pageTable = options.kvPageTokens ? binding("input", 2, {fixed(1)}, b.getI32Type()) : Buf{};
  for (Operation &inner : forward.getBody().front())
    if (failed(lowerOp(&inner)))
      return failure();
  return success();
}

// The most rows of a verify_batch entry (decode batch times verify tokens).
constexpr int64_t kMaxVerifyBatchRows = 128;

FailureOr<LoweredModel> Lowering::run() {
  auto forward = graph.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.getNumArguments() != 2)
    return graph.emitError() << "targets lower a func.func @forward(ids, positions)";
  if (!llvm::cast<RankedTensorType>(forward.getArgument(0).getType()).isDynamicDim(0))
    return forward.emitOpError() << "must take a dynamic number of tokens to serve prefill "
                                    "and decode (build the graph with dynamic tokens)";
  // The plan's ops: the caller's context need not have loaded the dialect.
  ctx->getOrLoadDialect<plan::PlanDialect>();
  auto logits = llvm::cast<RankedTensorType>(forward.getResultTypes()[0]);
  bool perToken = logits.isDynamicDim(0);
  if (LayoutAttr layout = graphLayout(graph))
    world = layout.devices();
  model.plan = ModuleOp::create(graph.getLoc());
  model.entries = {{"prefill", options.maxPrefillTokens, perToken}, {"decode", 1, perToken}};
  if (options.decodeBatch > 1)
    model.entries.push_back({"decode_batch", options.decodeBatch, true, options.decodeBatch});
  if (options.verifyTokens > 0) {
    model.entries.push_back({"verify", options.verifyTokens, true});
    // With conversations stepped together, also their verify calls: each
    // conversation's rows (the last accepted token and its drafts, padded).
    // Up to kMaxVerifyBatchRows rows in all: beyond, targets run products of
    // that many rows as prefill's (bf16 activations on tensor cores), whose
    // rounding would no longer give decode's tokens.
    if (options.decodeBatch > 1 &&
        options.decodeBatch * options.verifyTokens <= kMaxVerifyBatchRows) {
      EntryInfo batch{"verify_batch", options.decodeBatch * options.verifyTokens, true,
                      options.decodeBatch};
      batch.rowsPerSequence = options.verifyTokens;
      model.entries.push_back(batch);
    }
  }
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
  // Targets that can choose greedy tokens where the logits are.
  if (std::optional<KernelSpec> greedy = hooks.greedyKernel();
      greedy && kernelIndex.try_emplace(greedy->name, model.kernels.size()).second)
    model.kernels.push_back(std::move(*greedy));
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
