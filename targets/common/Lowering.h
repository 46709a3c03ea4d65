// The lowering of a graph to a plan, shared by its files: LowerToPlan.cpp
// (the ops of one rank, entry points) and LowerRanks.cpp (what spans ranks:
// shard ops, token collectives, comm groups). Private to targets/common.
#pragma once

#include "dialects/kiln/KilnOps.h"
#include "dialects/plan/PlanOps.h"
#include "targets/common/CommGroups.h"
#include "targets/common/Generators.h"
#include "targets/common/LowerToPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <map>
#include <string>
#include <tuple>

namespace kiln::kernels::lowering {

using namespace mlir;

constexpr int64_t kTileRows = 16; // activation rows are padded to AMX tile height

// A buffer of the plan with its shape, as the lowering tracks it.
struct Buf {
  Value value;
  SmallVector<plan::DimAttr> shape;
  Type elem;
};

class Lowering {
public:
  Lowering(ModuleOp graph, const LowerOptions &options, const TargetHooks &hooks)
      : ctx(graph.getContext()), graph(graph), options(options), hooks(hooks), b(ctx) {}

  FailureOr<LoweredModel> run();

private:
  plan::DimAttr fixed(int64_t n) { return plan::DimAttr::get(ctx, n, 0, 1); }
  // An activation's rows: T of them (padded to the tile height), or in a
  // split entry's whole-sequence ops (rowScale = the split) split * T.
  plan::DimAttr rows() { return plan::DimAttr::get(ctx, 0, rowScale, kTileRows * rowScale); }
  // Exactly T (or split * T) rows, for collectives over tokens.
  plan::DimAttr exactRows(int64_t scale) { return plan::DimAttr::get(ctx, 0, scale, 1); }
  ArrayAttr shapeAttr(ArrayRef<plan::DimAttr> dims) {
    return b.getArrayAttr(SmallVector<Attribute>(dims.begin(), dims.end()));
  }
  // An activation with a token dimension first: [T (padded), rest...].
  Buf alloc(ArrayRef<int64_t> rest, Type elem) {
    SmallVector<plan::DimAttr> dims = {rows()};
    for (int64_t d : rest)
      dims.push_back(fixed(d));
    return allocShape(dims, elem);
  }
  Buf allocShape(ArrayRef<plan::DimAttr> dims, Type elem) {
    auto op = plan::AllocOp::create(b, loc, plan::BufferType::get(ctx), shapeAttr(dims),
                                    TypeAttr::get(elem), IntegerAttr());
    return {op.getBuffer(), SmallVector<plan::DimAttr>(dims), elem};
  }
  Buf view(const Buf &source, ArrayRef<plan::DimAttr> dims, int64_t byteOffset = 0) {
    auto op = plan::ViewOp::create(b, loc, plan::BufferType::get(ctx), source.value,
                                   b.getI64IntegerAttr(byteOffset), shapeAttr(dims),
                                   TypeAttr::get(source.elem));
    return {op.getView(), SmallVector<plan::DimAttr>(dims), source.elem};
  }
  Buf binding(StringRef kind, int64_t index, ArrayRef<plan::DimAttr> dims, Type elem) {
    auto op =
        plan::BindingOp::create(b, loc, plan::BufferType::get(ctx), b.getStringAttr(kind),
                                b.getI64IntegerAttr(index), shapeAttr(dims), TypeAttr::get(elem));
    return {op.getBuffer(), SmallVector<plan::DimAttr>(dims), elem};
  }
  // Launches `kernel` over `work` independent pieces (rows, columns, heads).
  void launch(const KernelSpec &kernel, ArrayRef<Buf> buffers, ArrayRef<StringRef> scalars,
              Work work, StringRef what);

  // The activation a graph value lives in.
  Buf &act(Value v) { return values[v]; }
  // An expert stack: a bf16 weight as the checkpoint has it, or the bf16
  // output of an NVFP4 decode.
  FailureOr<Buf> stackOf(Value v) {
    if (v.getDefiningOp<WeightOp>())
      return weight(v, Transform::None);
    return act(v);
  }
  // The weight buffer of a kiln.weight, bound (and its binding recorded) on
  // first use in this entry.
  FailureOr<Buf> weight(Value v, Transform transform);

  // The last dimension of a graph value.
  static int64_t width(Value v) {
    return llvm::cast<RankedTensorType>(v.getType()).getShape().back();
  }
  // A [T, heads, headDim] activation's dims.
  SmallVector<plan::DimAttr> headRows(Value v) {
    auto t = llvm::cast<RankedTensorType>(v.getType());
    return {rows(), fixed(t.getDimSize(1)), fixed(t.getDimSize(2))};
  }

  // The comm group of the ranks of `grid` along `axes`.
  FailureOr<int64_t> commGroup(Operation *user, FlatSymbolRefAttr grid, ArrayRef<int16_t> axes);
  // A plan.collective from `source` into a new buffer of `shape`.
  Buf collective(StringRef kind, const Buf &source, ArrayRef<plan::DimAttr> shape, int64_t group,
                 int64_t axis, StringRef what);
  // Sequence parallelism's token collectives: every rank's T rows, exactly,
  // into the whole sequence (rowScale becomes the split), and the sum of the
  // whole sequence, each rank keeping its T rows (rowScale becomes 1).
  Buf gatherTokens(const Buf &in, int64_t group, StringRef what);
  // Both: exactly T rows a rank from fromScale x T to toScale x T.
  Buf tokenCollective(StringRef kind, const Buf &in, int64_t fromScale, int64_t toScale,
                      int64_t group, StringRef what);
  Buf scatterTokens(const Buf &in, int64_t group, StringRef what);
  // kiln.megamoe (LowerMegaMoE.cpp).
  LogicalResult lowerMegaMoE(MegaMoEOp o, StringRef what);
  // shard.all_slice, all_reduce, all_gather, reduce_scatter and
  // kiln.local_experts (LowerRanks.cpp).
  LogicalResult lowerShardOp(Operation *op, StringRef what);

  LogicalResult lowerEntry(func::FuncOp forward, const EntryInfo &entry);
  // Each op to its lowering below; an op no target lowers is an error.
  LogicalResult lowerOp(Operation *op);
  // One graph op each (LowerOps.cpp, LowerLinear.cpp): the buffers of its
  // results and the launches of the kernels the target chose. `what` names
  // the launches in the plan (the op's name location).
  LogicalResult lower(Nvfp4DequantOp o, StringRef what);
  LogicalResult lower(ExpertSwiGLUOp o, StringRef what);
  LogicalResult lower(ExpertNormOp o, StringRef what);
  LogicalResult lower(CombineOp o, StringRef what);
  LogicalResult lower(EmbedOp o, StringRef what);
  LogicalResult lower(RmsNormOp o, StringRef what);
  LogicalResult lower(HeadNormOp o, StringRef what);
  LogicalResult lower(LinearOp o, StringRef what);
  LogicalResult lower(SplitHeadsOp o, StringRef what);
  LogicalResult lower(MergeHeadsOp o, StringRef what);
  LogicalResult lower(RopeOp o, StringRef what);
  LogicalResult lower(HeadNormRopeOp o, StringRef what);
  LogicalResult lower(AttentionOp o, StringRef what);
  LogicalResult lower(NormResidualOp o, StringRef what);
  LogicalResult lower(RouterTopKOp o, StringRef what);
  LogicalResult lower(LogitsOp o, StringRef what);
  LogicalResult lower(func::ReturnOp o, StringRef what);
  // A head-row kernel (head_norm, rope, head_norm_rope): `input` [T, heads,
  // head_dim], then `extra` (weight, positions), then `result`'s new f32
  // buffer of the input's shape; scalars tokens, part, parts.
  void launchHeadRows(const KernelLaunch &kernel, Value input, ArrayRef<Buf> extra, Value result,
                      StringRef what);
  // kiln.mul and kiln.add (`kind`): an activation and a weight or another
  // activation of the same shape.
  LogicalResult lowerBinary(Operation *op, StringRef kind, StringRef what);
  // y = x · Wᵀ through the target's matrix-core GEMM, split-K included.
  // A GEMM that reads bf16 rows gets x's bf16 copy: made by the GEMM's cast
  // kernel, or, where `source` (the graph value x holds) was cast so before
  // in this entry (q, k and v of one input), that copy again.
  void launchMatrixGemm(const TargetHooks::MatrixGemm &gemm, int64_t n, const Buf &x, const Buf &w,
                        const Buf &y, StringRef what, Value source = Value());
  // A later product of o's input with a weight of o's type (not a router's,
  // not lowered yet): the GEMV path may compute both in one launch
  // (TargetHooks::gemvPair). Null if none.
  LinearOp gemvSibling(LinearOp o);
  // y = x · Wᵀ through the target's GEMV; `lastRow`: of the last token's row
  // only (a kernel over a range of rows reads just that one).
  void launchGemv(const TargetHooks::Gemv &gemv, const Buf &x, const Buf &w, const Buf &y,
                  bool lastRow, StringRef what);

  MLIRContext *ctx;
  ModuleOp graph;
  const LowerOptions &options;
  const TargetHooks &hooks;
  OpBuilder b;
  int64_t entryMaxTokens = 1;
  // The most rows the op being lowered sees: its entry's max tokens, times
  // the split for a split entry's whole-sequence ops.
  int64_t maxRows() const { return entryMaxTokens * rowScale; }
  int64_t entrySequences = 0;    // EntryInfo::sequences of the entry being lowered
  int64_t entrySequenceRows = 1; // EntryInfo::rowsPerSequence of the entry being lowered
  SequenceLayout entryLayout() const {
    return entrySequences ? SequenceLayout{entrySequences, entrySequenceRows} : SequenceLayout{};
  }
  bool entryEveryLogit = false; // EntryInfo::logitsPerToken of the entry being lowered
  // The entry is a decode step's (decode, batched decode, verify): its
  // results must be decode's bit for bit (TargetHooks::tiledGemm).
  bool decodeStep() const { return maxRows() == 1 || entrySequences || entryEveryLogit; }
  int64_t entrySplit = 1; // EntryInfo::split of the entry being lowered
  // The rows of the op being lowered: 1 (T) or, for a split entry's
  // whole-sequence ops, entrySplit.
  int64_t rowScale = 1;
  Location loc = UnknownLoc::get(ctx);
  LoweredModel model;
  llvm::StringMap<size_t> kernelIndex;
  llvm::StringMap<int64_t> weightIndex; // binding key -> index
  llvm::DenseMap<Value, Buf> values;    // per entry
  llvm::DenseMap<Value, Buf> bound;     // weights bound in this entry
  // Per entry: bf16 copies of activations, by graph value, row scale and the
  // cast kernel that made them (or that a norm writing the copy replaced).
  using Bf16CopyKey = std::tuple<const void *, int64_t, std::string>;
  std::map<Bf16CopyKey, Buf> bf16Copies;
  Bf16CopyKey bf16CopyKey(Value value, const std::string &cast) const {
    return {value.getAsOpaquePointer(), rowScale, cast};
  }
  // Where a matrix GEMM reading `value` would cast it to bf16 (the first
  // such reader), the key its copy goes by: a norm producing `value` then
  // writes the copy itself (bf16Copies).
  std::optional<Bf16CopyKey> pendingBf16Copy(Value value);
  // Whether attention heads `heads` have one reader, a merge of the heads
  // whose one reader is a GEMM that would cast it to bf16 (pendingBf16Copy):
  // the attention kernel may then write them as bf16, that GEMM's copy.
  bool castingGemmReads(Value heads);
  // A norm whose `result` (`width` wide) a matrix GEMM would cast to bf16:
  // where the target has `withCopy` (the norm writing its rows also as
  // bf16), launches it with `buffers` and a bf16 copy after them, and
  // records the copy. False, launching nothing, otherwise.
  bool launchNormWithBf16Copy(Value result, int64_t width,
                              llvm::function_ref<std::optional<KernelLaunch>()> withCopy,
                              ArrayRef<Buf> buffers, StringRef what);
  CommGroups groups;
  int64_t world = 1; // max(tp, ep) of the graph's kiln.layout
  Buf ids, positions;
  Buf pageTable; // a paged plan's (LowerOptions::kvPageTokens), else empty
  int64_t attentionLayer = 0;
};

} // namespace kiln::kernels::lowering
