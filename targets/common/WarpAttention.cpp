// GPU attention in three launches, shaped for decode over a long KV cache:
//  1. split: one warp per (token, up to 4 query heads of one KV head, split
//     of the visible keys) runs an online softmax per query head over its
//     keys, several keys per step (a key's head_dim/16 lanes each hold 16
//     dims, each key read once for the warp's query heads), and writes (acc,
//     max, sum) per query head;
//  2. merge: one warp per (token, query head) rescales and sums the splits;
//  3. append: the new tokens' K/V go into the cache (a ring of `window`
//     slots on sliding layers), after every query has read the old contents.
// Keys before `past` come from the cache, the rest from this call's K/V.
// Batched (`sequences` > 0, the decode_batch entry): token t is the next token
// of conversation t, at position positions[t]; the caches hold `sequences`
// conversations one after another, so conversation t's slots start at
// t * slots (slots = the cache's rows / sequences).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/KvCacheAccess.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;
namespace {

// Stored per (token, head, split): acc[0..D), then max and sum; D + 4 keeps
// rows 16-byte aligned.
int64_t partialWidth(int64_t headDim) { return headDim + 4; }

// Query heads of one KV head a split warp takes together: each key and value
// it loads serves all of them (GQA), where a warp per query head would read
// the KV head's keys once per query head. More would not fit the registers:
// each query head holds its query, accumulator and softmax state.
constexpr int64_t kMaxHeadsPerWarp = 4;

} // namespace

bool warpAttentionFits(int64_t headDim) {
  return headDim % 16 == 0 && headDim / 16 <= 32 && 32 % (headDim / 16) == 0;
}

int64_t attentionHeadsPerWarp(int64_t qHeads, int64_t kvHeads) {
  int64_t group = qHeads / kvHeads;
  for (int64_t g = kMaxHeadsPerWarp; g > 1; --g)
    if (group % g == 0)
      return g;
  return 1;
}

// Built as typed IR (KernelBuilder.h).
KernelSpec attentionSplitWarp(const AttentionShape &shape, int64_t splits,
                              SequenceLayout sequences) {
  const int64_t qHeads = shape.qHeads, kvHeads = shape.kvHeads, headDim = shape.headDim;
  const int64_t window = shape.window;
  const double scale = shape.scale;
  const KvElement cache = shape.cache;
  const int64_t lanesPerKey = headDim / 16, keysPerStep = 32 / lanesPerKey;
  const int64_t perWarp = attentionHeadsPerWarp(qHeads, kvHeads);
  std::string name = "attention_split_warp_" + str(qHeads) + "x" + str(kvHeads) + "x" +
                     str(headDim) + (window ? "_w" + str(window) : "_global") + "_s" + str(splits) +
                     (perWarp > 1 ? "_q" + str(perWarp) : "") + kvSuffix(shape) +
                     pageSuffix(shape) + batchSuffix(sequences);
  Tiling tiling;
  tiling.set("kind", "warp-split-kv")
      .set("parallel", "tokens*heads*splits")
      .set("splits", splits)
      .set("window", window)
      .set("heads_per_warp", perWarp);
  if (cache != KvElement::F32)
    tiling.set("kv_cache", kvElementName(cache));
  if (shape.paged())
    tiling.set("page_tokens", shape.pageTokens);
  // q, k, v, the caches, [positions,] the partials[, page table], tokens, past.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type kv = MemRefType::get({dynamic, kvHeads, headDim}, b.getF32Type());
    Type kvCache = MemRefType::get({dynamic, kvHeads, headDim}, kvElementType(b, cache));
    std::vector<Type> types = {MemRefType::get({dynamic, qHeads, headDim}, b.getF32Type()), kv, kv,
                               kvCache, kvCache};
    if (sequences)
      types.push_back(MemRefType::get({dynamic}, b.getI32Type()));
    types.push_back(
        MemRefType::get({dynamic, qHeads, splits, partialWidth(headDim)}, b.getF32Type()));
    appendPageTable(b, shape, types);
    types.push_back(b.getI64Type());
    types.push_back(b.getI64Type());
    return types;
  };
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    FloatType f32 = b.getF32Type();
    auto v16 = VectorType::get({16}, f32);
    const unsigned outArg = sequences ? 6 : 5;
    Value q = k.arg(0), keys = k.arg(1), values = k.arg(2), keyCache = k.arg(3),
          valueCache = k.arg(4), out = k.arg(outArg);
    Value positions = sequences ? k.arg(5) : Value();
    WarpOfPart w = warpOfPart(k);
    Value c0 = w.c0, c1 = w.c1;
    Value lpk = k.index(lanesPerKey), kps = k.index(keysPerStep), c16 = k.index(16);
    Value group = k.index(qHeads / kvHeads), perWarpC = k.index(perWarp);
    Value splitsC = k.index(splits), perToken = k.index(qHeads / perWarp * splits);
    Value windowC = k.index(window), dim = k.index(headDim), dim1 = k.index(headDim + 1);
    Value scaleC = arith::ConstantFloatOp::create(b, f32, APFloat(float(scale)));
    Value floor = arith::ConstantFloatOp::create(b, f32, APFloat(-1.0e+30f));
    Value zeroF = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value zeroV = arith::ConstantOp::create(b, v16, DenseElementsAttr::get(v16, 0.0f));
    const unsigned scalarArg = outArg + (shape.paged() ? 2 : 1);
    Value tCount = k.argIndex(scalarArg), past = k.argIndex(scalarArg + 1);
    const CacheRows rows(b, shape, sequences, keyCache,
                         shape.paged() ? k.arg(outArg + 1) : Value());
    Value g = arith::DivUIOp::create(b, w.lane, lpk);
    Value li = arith::RemUIOp::create(b, w.lane, lpk);
    Value d0 = arith::MulIOp::create(b, li, c16);
    Value firstGroup = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, w.lane, lpk);
    Value lead = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, w.lane, c0);
    Value items = arith::MulIOp::create(b, tCount, perToken);
    auto loop = scf::ForOp::create(b, w.warp, items, w.warps);
    b.setInsertionPointToStart(loop.getBody());
    Value item = loop.getInductionVar();
    Value t = arith::DivUIOp::create(b, item, perToken);
    Value rest = arith::RemUIOp::create(b, item, perToken);
    Value hg = arith::DivUIOp::create(b, rest, splitsC);
    Value split = arith::RemUIOp::create(b, rest, splitsC);
    // Query heads hFirst .. + perWarp - 1, all of KV head kvh.
    Value hFirst = arith::MulIOp::create(b, hg, perWarpC);
    Value kvh = arith::DivUIOp::create(b, hFirst, group);
    TokenState state = tokenState(b, sequences, positions, past, t, rows.stride(), c0);
    // Visible keys [lo, p]: p - window < j for sliding layers; this split's
    // share [kb, ke) of them.
    Value p1 = arith::AddIOp::create(b, state.position, c1);
    Value isGlobal = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, windowC, c0);
    Value fits = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, p1, windowC);
    Value loW = arith::SubIOp::create(b, p1, windowC);
    Value loS = arith::SelectOp::create(b, fits, c0, loW);
    Value lo = arith::SelectOp::create(b, isGlobal, c0, loS);
    Value n = arith::SubIOp::create(b, p1, lo);
    Value n1 = arith::AddIOp::create(b, n, splitsC);
    Value n2 = arith::SubIOp::create(b, n1, c1);
    Value chunk = arith::DivUIOp::create(b, n2, splitsC);
    Value off = arith::MulIOp::create(b, split, chunk);
    Value kb0 = arith::AddIOp::create(b, lo, off);
    Value kb = arith::MinUIOp::create(b, kb0, p1);
    Value ke0 = arith::AddIOp::create(b, kb, chunk);
    Value ke = arith::MinUIOp::create(b, ke0, p1);
    SmallVector<Value> heads, queries, init;
    for (int64_t i = 0; i < perWarp; ++i) {
      heads.push_back(arith::AddIOp::create(b, hFirst, k.index(i)));
      queries.push_back(vector::LoadOp::create(b, v16, q, ValueRange{t, heads[i], d0}, false,
                                               llvm::MaybeAlign(16)));
      init.append({floor, zeroF, zeroV});
    }
    // Per query head: its online softmax step for each key (each key read
    // once for all the warp's heads).
    auto keysLoop = scf::ForOp::create(b, kb, ke, kps, init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(keysLoop.getBody());
      ValueRange carried = keysLoop.getRegionIterArgs();
      Value j = arith::AddIOp::create(b, keysLoop.getInductionVar(), g);
      Value valid = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, j, ke);
      Value jc = arith::SelectOp::create(b, valid, j, kb);
      Value cached = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, jc, state.past);
      auto kv = scf::IfOp::create(b, TypeRange{v16, v16}, cached, /*withElse=*/true);
      // A key and its value: the cache's, or this call's rounded as the
      // cache would hold them.
      auto loadPair = [&](Value k0, Value v0, Value row, bool cached) {
        auto load = [&](Value from, KvStorage storage) -> Value {
          if (cached)
            return loadCachedF32(b, from, ValueRange{row, kvh, d0}, 16, storage, 16);
          return roundAsCached(b,
                               vector::LoadOp::create(b, v16, from, ValueRange{row, kvh, d0}, false,
                                                      llvm::MaybeAlign(16)),
                               storage);
        };
        Value kr = load(k0, shape.keys());
        Value vr = load(v0, shape.values());
        scf::YieldOp::create(b, ValueRange{kr, vr});
      };
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&kv.getThenRegion().front());
        loadPair(keyCache, valueCache, rows.row(b, state.base, jc), true);
        b.setInsertionPointToStart(&kv.getElseRegion().front());
        Value t1 = arith::SubIOp::create(b, jc, state.past);
        loadPair(keys, values, arith::AddIOp::create(b, state.row0, t1), false);
      }
      SmallVector<Value> next;
      for (int64_t i = 0; i < perWarp; ++i) {
        Value m = carried[3 * i], l = carried[3 * i + 1], acc = carried[3 * i + 2];
        Value prod = arith::MulFOp::create(b, kv.getResult(0), queries[i]);
        Value dot = vector::ReductionOp::create(b, vector::CombiningKind::ADD, prod);
        // The key's lanes hold its 16-dim slices: their sum.
        SmallVector<int32_t> offsets;
        for (int32_t o = 1; o < lanesPerKey; o *= 2)
          offsets.push_back(o);
        if (offsets.empty())
          dot =
              arith::AddFOp::create(b, dot, arith::ConstantFloatOp::create(b, f32, APFloat(0.0f)));
        else
          dot = xorShuffleReduce(b, dot, offsets, [&](Value own, Value other) {
            return arith::AddFOp::create(b, own, other).getResult();
          });
        Value sc = arith::MulFOp::create(b, dot, scaleC);
        Value mc = arith::MaximumFOp::create(b, m, sc);
        Value mNew = arith::SelectOp::create(b, valid, mc, m);
        Value corr = math::ExpOp::create(b, arith::SubFOp::create(b, m, mNew));
        Value ew = math::ExpOp::create(b, arith::SubFOp::create(b, sc, mNew));
        Value pw = arith::SelectOp::create(b, valid, ew, zeroF);
        Value lc = arith::MulFOp::create(b, l, corr);
        Value lNew = arith::AddFOp::create(b, lc, pw);
        Value corrV = vector::BroadcastOp::create(b, v16, corr);
        Value pwV = vector::BroadcastOp::create(b, v16, pw);
        Value ac = arith::MulFOp::create(b, acc, corrV);
        Value accNew = vector::FMAOp::create(b, kv.getResult(1), pwV, ac);
        next.append({mNew, lNew, accNew});
      }
      scf::YieldOp::create(b, next);
    }
    // The merge of the warp's key groups (lanes lanesPerKey apart hold the
    // same dims of different keys), then each head's stores.
    for (int64_t i = 0; i < perWarp; ++i) {
      Value m = keysLoop.getResult(3 * i), l = keysLoop.getResult(3 * i + 1);
      Value acc = keysLoop.getResult(3 * i + 2);
      for (int32_t offset = lanesPerKey; offset < 32; offset *= 2) {
        auto shuffle = [&](Value v) {
          return gpu::ShuffleOp::create(b, v, offset, 32, gpu::ShuffleMode::XOR).getShuffleResult();
        };
        Value mX = shuffle(m);
        Value lX = shuffle(l);
        Value mN = arith::MaximumFOp::create(b, m, mX);
        Value fa = math::ExpOp::create(b, arith::SubFOp::create(b, m, mN));
        Value fb = math::ExpOp::create(b, arith::SubFOp::create(b, mX, mN));
        Value la = arith::MulFOp::create(b, l, fa);
        Value lN = math::FmaOp::create(b, lX, fb, la);
        SmallVector<Value> elems;
        for (int64_t d = 0; d < 16; ++d)
          elems.push_back(shuffle(vector::ExtractOp::create(b, acc, ArrayRef<int64_t>{d})));
        Value accX = vector::FromElementsOp::create(b, v16, elems);
        Value faV = vector::BroadcastOp::create(b, v16, fa);
        Value fbV = vector::BroadcastOp::create(b, v16, fb);
        Value accA = arith::MulFOp::create(b, acc, faV);
        acc = vector::FMAOp::create(b, accX, fbV, accA);
        m = mN;
        l = lN;
      }
      {
        auto ifFirst = scf::IfOp::create(b, firstGroup, /*withElse=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
        vector::StoreOp::create(b, acc, out, ValueRange{t, heads[i], split, d0}, false,
                                llvm::MaybeAlign(16));
      }
      auto ifLead = scf::IfOp::create(b, lead, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifLead.getThenRegion().front());
      memref::StoreOp::create(b, m, out, ValueRange{t, heads[i], split, dim});
      memref::StoreOp::create(b, l, out, ValueRange{t, heads[i], split, dim1});
    }
  });
}

// Built as typed IR (KernelBuilder.h).
KernelSpec attentionMergeWarp(int64_t qHeads, int64_t headDim, int64_t splits) {
  std::string name =
      "attention_merge_warp_" + str(qHeads) + "x" + str(headDim) + "_s" + str(splits);
  Tiling tiling;
  tiling.set("kind", "warp-rows").set("parallel", "tokens*heads");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, qHeads, splits, partialWidth(headDim)}, b.getF32Type()),
            MemRefType::get({dynamic, qHeads, headDim}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    FloatType f32 = b.getF32Type();
    auto v4 = VectorType::get({4}, f32);
    Value in = k.arg(0), out = k.arg(1);
    WarpOfPart w = warpOfPart(k);
    Value c4 = k.index(4), c128 = k.index(128), heads = k.index(qHeads);
    Value dim = k.index(headDim), dim1 = k.index(headDim + 1);
    Value floor = arith::ConstantFloatOp::create(b, f32, APFloat(-1.0e+30f));
    Value zeroF = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value oneF = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value zeroV = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    Value tCount = k.argIndex(2);
    Value items = arith::MulIOp::create(b, tCount, heads);
    Value l4 = arith::MulIOp::create(b, w.lane, c4);
    auto loop = scf::ForOp::create(b, w.warp, items, w.warps);
    b.setInsertionPointToStart(loop.getBody());
    Value item = loop.getInductionVar();
    Value t = arith::DivUIOp::create(b, item, heads);
    Value h = arith::RemUIOp::create(b, item, heads);
    // Straight-line over the splits, so every load can be in flight at
    // once: the splits' maxima, then their sums rescaled to the overall
    // maximum, then each lane's 4 dims of the rescaled accumulators.
    SmallVector<Value> split, m, sum, f;
    Value mx = floor;
    for (int64_t i = 0; i < splits; ++i) {
      split.push_back(k.index(i));
      m.push_back(memref::LoadOp::create(b, in, ValueRange{t, h, split[i], dim}));
      sum.push_back(memref::LoadOp::create(b, in, ValueRange{t, h, split[i], dim1}));
      mx = arith::MaximumFOp::create(b, mx, m[i]);
    }
    Value total = zeroF;
    for (int64_t i = 0; i < splits; ++i) {
      f.push_back(math::ExpOp::create(b, arith::SubFOp::create(b, m[i], mx)));
      total = math::FmaOp::create(b, sum[i], f[i], total);
    }
    Value inv = arith::DivFOp::create(b, oneF, total);
    auto dims = scf::ForOp::create(b, l4, dim, c128);
    b.setInsertionPointToStart(dims.getBody());
    Value c = dims.getInductionVar();
    Value acc = zeroV;
    for (int64_t i = 0; i < splits; ++i) {
      Value fv = vector::BroadcastOp::create(b, v4, arith::MulFOp::create(b, f[i], inv));
      Value av = vector::LoadOp::create(b, v4, in, ValueRange{t, h, split[i], c}, false,
                                        llvm::MaybeAlign(16));
      acc = vector::FMAOp::create(b, av, fv, acc);
    }
    vector::StoreOp::create(b, acc, out, ValueRange{t, h, c}, false, llvm::MaybeAlign(16));
  });
}

// Built as typed IR (KernelBuilder.h).
KernelSpec kvAppendWarp(const AttentionShape &shape, SequenceLayout sequences) {
  const int64_t kvHeads = shape.kvHeads, headDim = shape.headDim;
  const KvElement cache = shape.cache;
  std::string name = "kv_append_warp_" + str(kvHeads) + "x" + str(headDim) + kvSuffix(shape) +
                     pageSuffix(shape) + batchSuffix(sequences);
  Tiling tiling;
  tiling.set("kind", "warp-rows").set("parallel", "tokens*kv_heads");
  if (cache != KvElement::F32)
    tiling.set("kv_cache", kvElementName(cache));
  if (shape.paged())
    tiling.set("page_tokens", shape.pageTokens);
  // k, v, the caches, [positions,][ page table,] tokens, past.
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type kv = MemRefType::get({ShapedType::kDynamic, kvHeads, headDim}, b.getF32Type());
    Type kvCache =
        MemRefType::get({ShapedType::kDynamic, kvHeads, headDim}, kvElementType(b, cache));
    std::vector<Type> types = {kv, kv, kvCache, kvCache};
    if (sequences)
      types.push_back(MemRefType::get({ShapedType::kDynamic}, b.getI32Type()));
    appendPageTable(b, shape, types);
    types.push_back(b.getI64Type());
    types.push_back(b.getI64Type());
    return types;
  };
  // Token t goes to slot (past + t) % slots unless a later token of this call
  // lands on the same slot: the result is the ring a sequential append leaves.
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    auto v4 = VectorType::get({4}, b.getF32Type());
    const unsigned buffers = sequences ? 5 : 4, scalars = buffers + (shape.paged() ? 1 : 0);
    Value keys = k.arg(0), values = k.arg(1), keyCache = k.arg(2), valueCache = k.arg(3);
    Value positions = sequences ? k.arg(4) : Value();
    WarpOfPart w = warpOfPart(k);
    Value c4 = k.index(4), c128 = k.index(128), heads = k.index(kvHeads);
    Value dim = k.index(headDim);
    Value tCount = k.argIndex(scalars), past = k.argIndex(scalars + 1);
    const CacheRows rows(b, shape, sequences, keyCache, shape.paged() ? k.arg(buffers) : Value());
    // Pages and batched rings keep every token's K/V; a sequential call's
    // ring only the last `slots` tokens'.
    Value batched = arith::ConstantIntOp::create(b, sequences || rows.paged() ? 1 : 0, 1);
    Value items = arith::MulIOp::create(b, tCount, heads);
    Value l4 = arith::MulIOp::create(b, w.lane, c4);
    auto loop = scf::ForOp::create(b, w.warp, items, w.warps);
    b.setInsertionPointToStart(loop.getBody());
    Value item = loop.getInductionVar();
    Value t = arith::DivUIOp::create(b, item, heads);
    Value h = arith::RemUIOp::create(b, item, heads);
    TokenState state = tokenState(b, sequences, positions, past, t, rows.stride(), w.c0);
    Value later = arith::AddIOp::create(b, t, rows.paged() ? tCount : rows.slots());
    Value keptInCall = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, later, tCount);
    Value kept = arith::OrIOp::create(b, keptInCall, batched);
    auto ifKept = scf::IfOp::create(b, kept, /*withElse=*/false);
    b.setInsertionPointToStart(&ifKept.getThenRegion().front());
    Value slot = rows.row(b, state.base, state.position);
    auto dims = scf::ForOp::create(b, l4, dim, c128);
    b.setInsertionPointToStart(dims.getBody());
    Value c = dims.getInductionVar();
    for (auto [from, to, storage] : {std::tuple{keys, keyCache, shape.keys()},
                                     std::tuple{values, valueCache, shape.values()}}) {
      Value row =
          vector::LoadOp::create(b, v4, from, ValueRange{t, h, c}, false, llvm::MaybeAlign(16));
      storeToCache(b, row, to, ValueRange{slot, h, c}, storage, 4 * kvElementBytes(cache));
    }
  });
}

} // namespace kiln::kernels
