#include "targets/nvptx/MmaDecodeAttention.h"

#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KvCacheAccess.h"
#include "targets/nvptx/FlashSoftmax.h"
#include "targets/nvptx/MmaSync.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace kiln::nvptx {

using namespace mlir;

namespace {

constexpr int64_t kTileKeys = 16; // keys a step: the P V MMA's k
constexpr int64_t kRows = 16;     // query heads an MMA holds

class DecodeAttentionBuilder {
public:
  DecodeAttentionBuilder(kernels::KernelScope &k, const kernels::AttentionShape &shape,
                         int64_t splits, kernels::SequenceLayout sequences)
      : k(k), b(k.b), s(shape), splits(splits), sequences(sequences), ctx(b.getContext()),
        f32(b.getF32Type()), bf16(b.getBF16Type()), i32(b.getI32Type()) {}

  void build() {
    const unsigned outArg = sequences ? 6 : 5;
    kernels::WarpOfPart w = kernels::warpOfPart(k);
    g = arith::DivUIOp::create(b, w.lane, idx(4));
    t = arith::RemUIOp::create(b, w.lane, idx(4));
    const unsigned scalarArg = outArg + (s.paged() ? 2 : 1);
    Value tokens = k.argIndex(scalarArg);
    past = k.argIndex(scalarArg + 1);
    rows.emplace(b, s, sequences, k.arg(3), s.paged() ? k.arg(outArg + 1) : Value());
    Value perToken = idx(s.kvHeads * splits);
    auto items = scf::ForOp::create(b, w.warp, arith::MulIOp::create(b, tokens, perToken), w.warps);
    b.setInsertionPointToStart(items.getBody());
    Value item = items.getInductionVar();
    token = arith::DivUIOp::create(b, item, perToken);
    Value rest = arith::RemUIOp::create(b, item, perToken);
    kvHead = arith::DivUIOp::create(b, rest, idx(splits));
    Value split = arith::RemUIOp::create(b, rest, idx(splits));
    kernels::TokenState state = kernels::tokenState(b, sequences, sequences ? k.arg(5) : Value(),
                                                    past, token, rows->stride(), idx(0));
    tokenPast = state.past;
    position = state.position;
    base = state.base;
    row0 = state.row0;

    // Visible keys [lo, position]; this split's share [kb, ke).
    Value p1 = arith::AddIOp::create(b, position, idx(1));
    Value lo = idx(0);
    if (s.window > 0)
      lo = arith::SelectOp::create(b, cmp(arith::CmpIPredicate::ule, p1, idx(s.window)), idx(0),
                                   arith::SubIOp::create(b, p1, idx(s.window)));
    Value n = arith::SubIOp::create(b, p1, lo);
    Value chunk =
        arith::DivUIOp::create(b, arith::AddIOp::create(b, n, idx(splits - 1)), idx(splits));
    keyBegin = arith::MinUIOp::create(
        b, arith::AddIOp::create(b, lo, arith::MulIOp::create(b, split, chunk)), p1);
    keyEnd = arith::MinUIOp::create(b, arith::AddIOp::create(b, keyBegin, chunk), p1);
    Value tiles = arith::DivUIOp::create(
        b, arith::AddIOp::create(b, arith::SubIOp::create(b, keyEnd, keyBegin), idx(kTileKeys - 1)),
        idx(kTileKeys));

    headA = arith::AddIOp::create(b, arith::MulIOp::create(b, kvHead, idx(s.group())), g);
    headB = arith::AddIOp::create(b, headA, idx(8));
    okA = cmp(arith::CmpIPredicate::ult, g, idx(s.group()));
    okB = cmp(arith::CmpIPredicate::ult, arith::AddIOp::create(b, g, idx(8)), idx(s.group()));
    loadQueries();

    const double inf = std::numeric_limits<double>::infinity();
    minusInf = arith::ConstantFloatOp::create(b, f32, APFloat(float(-inf)));
    zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    // The loop carries the softmax state, the output accumulators and the
    // next tile's keys and values, loaded while this one computes: its keys
    // once the scores are taken, its values once P V is.
    SmallVector<Value> init = {minusInf, minusInf, zero, zero};
    init.append(s.headDim / 2, zero);
    init.append(loadKeys(keyBegin));
    init.append(loadValues(keyBegin));
    auto loop = scf::ForOp::create(b, idx(0), tiles, idx(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value tileStart = arith::AddIOp::create(
          b, keyBegin, arith::MulIOp::create(b, loop.getInductionVar(), idx(kTileKeys)));
      SmallVector<Value> carried(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
      scf::YieldOp::create(b, attendTile(tileStart, carried));
    }
    store(loop.getResults().take_front(4 + s.headDim / 2), k.arg(outArg), split);
  }

private:
  Value idx(int64_t v) { return k.index(v); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) { return arith::CmpIOp::create(b, p, x, y); }

  // Two f32 as bf16 pairs: their bf16 (hi) and the bf16 of what that left
  // (lo), each as one i32 (the first value in the low half).
  std::pair<Value, Value> splitPair(Value x, Value y) {
    auto v2 = VectorType::get({2}, f32);
    auto b2 = VectorType::get({2}, bf16);
    Value pair = vector::FromElementsOp::create(b, v2, ValueRange{x, y});
    Value hi = arith::TruncFOp::create(b, b2, pair);
    Value rest = arith::SubFOp::create(b, pair, arith::ExtFOp::create(b, v2, hi));
    Value lo = arith::TruncFOp::create(b, b2, rest);
    return {LLVM::BitcastOp::create(b, i32, hi), LLVM::BitcastOp::create(b, i32, lo)};
  }

  // Four f32 of q at (token, head, col ..), zeros where `ok` is false.
  SmallVector<Value> queryQuad(Value head, Value ok, Value col) {
    auto v4 = VectorType::get({4}, f32);
    Value safe = arith::SelectOp::create(b, ok, head, idx(0));
    Value quad = vector::LoadOp::create(b, v4, k.arg(0), ValueRange{token, safe, col}, false,
                                        llvm::MaybeAlign(16));
    Value zeros = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    quad = arith::SelectOp::create(b, ok, quad, zeros);
    SmallVector<Value> out;
    for (int64_t e = 0; e < 4; ++e)
      out.push_back(vector::ExtractOp::create(b, quad, ArrayRef<int64_t>{e}));
    return out;
  }

  // The score MMAs' A fragments, hi and lo, per 16 dims c: this thread's
  // dims D/4 t + 4c .. + 3 of heads A and B (rows g, g + 8).
  void loadQueries() {
    Value first = arith::MulIOp::create(b, t, idx(s.headDim / 4));
    for (int64_t c = 0; c < s.headDim / 16; ++c) {
      Value col = arith::AddIOp::create(b, first, idx(4 * c));
      SmallVector<Value> a = queryQuad(headA, okA, col), bq = queryQuad(headB, okB, col);
      auto [a01h, a01l] = splitPair(a[0], a[1]);
      auto [b01h, b01l] = splitPair(bq[0], bq[1]);
      auto [a23h, a23l] = splitPair(a[2], a[3]);
      auto [b23h, b23l] = splitPair(bq[2], bq[3]);
      queriesHi.push_back({a01h, b01h, a23h, b23h});
      queriesLo.push_back({a01l, b01l, a23l, b23l});
    }
  }

  // `lanes` elements of the key or value at position `pos` from dim `col`,
  // as the cache stores them (bf16, or an FP8 cache's codes, decoded where
  // they are used: the prefetched tile takes half the registers): the
  // cache's below the token's past, else this call's rounded as the cache
  // holds them; positions at or past keyEnd read the split's first key (their
  // probability is zero), or the token's own where the split is empty.
  Value kvRow(unsigned callArg, unsigned cacheArg, Value pos, Value col, int64_t lanes) {
    Value jc = arith::MinUIOp::create(
        b, arith::SelectOp::create(b, cmp(arith::CmpIPredicate::ult, pos, keyEnd), pos, keyBegin),
        position);
    auto stored = VectorType::get({lanes}, kernels::kvElementType(b, s.cache));
    auto ifCached = scf::IfOp::create(b, TypeRange{stored},
                                      cmp(arith::CmpIPredicate::ult, jc, tokenPast), true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifCached.getThenRegion().front());
    Value slot = rows->row(b, base, jc);
    const int64_t bytes = kernels::kvElementBytes(s.cache);
    scf::YieldOp::create(b, ValueRange{vector::LoadOp::create(
                                b, stored, k.arg(cacheArg), ValueRange{slot, kvHead, col}, false,
                                llvm::MaybeAlign(std::min<int64_t>(16, bytes * lanes)))});
    b.setInsertionPointToStart(&ifCached.getElseRegion().front());
    Value row = arith::AddIOp::create(b, row0, arith::SubIOp::create(b, jc, tokenPast));
    Value call = vector::LoadOp::create(b, VectorType::get({lanes}, f32), k.arg(callArg),
                                        ValueRange{row, kvHead, col}, false,
                                        llvm::MaybeAlign(std::min<int64_t>(16, 4 * lanes)));
    scf::YieldOp::create(
        b, ValueRange{kernels::narrowToCache(b, call, cacheArg == 3 ? s.keys() : s.values())});
    return ifCached.getResult(0);
  }
  bool fp8() const { return s.cache == kernels::KvElement::FP8; }
  // The P V product's B fragment for dim `jd` of this thread's four value
  // rows: bf16 pairs (rows 0, 1) and (2, 3). An FP8 cache's four codes are
  // decoded together, one dim at a time (a whole row at once would spill).
  SmallVector<Value> valueFragment(ArrayRef<Value> valueRows, int64_t jd) {
    if (!fp8())
      return {pairOf(at(valueRows[0], jd), at(valueRows[1], jd)),
              pairOf(at(valueRows[2], jd), at(valueRows[3], jd))};
    Value codes =
        vector::FromElementsOp::create(b, VectorType::get({4}, b.getI8Type()),
                                       ValueRange{at(valueRows[0], jd), at(valueRows[1], jd),
                                                  at(valueRows[2], jd), at(valueRows[3], jd)});
    Value pairs =
        vector::BitCastOp::create(b, VectorType::get({2}, i32), bf16Of(codes, s.values()));
    return {vector::ExtractOp::create(b, pairs, ArrayRef<int64_t>{0}),
            vector::ExtractOp::create(b, pairs, ArrayRef<int64_t>{1})};
  }
  // Codes of an FP8 cache as bf16 (decoded and scaled, then rounded as the
  // interpreter's bf16 attention inputs are).
  Value bf16Of(Value codes, kernels::KvStorage storage) {
    auto type = llvm::cast<VectorType>(codes.getType());
    return arith::TruncFOp::create(b, VectorType::get(type.getShape(), bf16),
                                   kernels::widenCached(b, codes, storage));
  }
  // The B fragment of key row `row`'s dims 16 chunk .. + 15 for this
  // thread: bf16 pairs 2 chunk and 2 chunk + 1 of the row.
  SmallVector<Value> keyFragment(Value row, int64_t chunk) {
    if (!fp8())
      return {vector::ExtractOp::create(b, row, ArrayRef<int64_t>{2 * chunk}),
              vector::ExtractOp::create(b, row, ArrayRef<int64_t>{2 * chunk + 1})};
    SmallVector<Value> four;
    for (int64_t e = 0; e < 4; ++e)
      four.push_back(at(row, 4 * chunk + e));
    Value codes = vector::FromElementsOp::create(b, VectorType::get({4}, b.getI8Type()), four);
    Value pairs = vector::BitCastOp::create(b, VectorType::get({2}, i32), bf16Of(codes, s.keys()));
    return {vector::ExtractOp::create(b, pairs, ArrayRef<int64_t>{0}),
            vector::ExtractOp::create(b, pairs, ArrayRef<int64_t>{1})};
  }

  // bf16 element `i` of a row.
  Value at(Value row, int64_t i) { return vector::ExtractOp::create(b, row, ArrayRef<int64_t>{i}); }
  Value pairOf(Value x, Value y) {
    Value pair = vector::FromElementsOp::create(b, VectorType::get({2}, bf16), ValueRange{x, y});
    return LLVM::BitcastOp::create(b, i32, pair);
  }

  // Keys g and g + 8 of the tile at `tileStart`, dims D/4 t ..., as
  // vector<D/8 x i32> (bf16 pairs).
  SmallVector<Value> loadKeys(Value tileStart) {
    const int64_t D = s.headDim;
    Value col = arith::MulIOp::create(b, t, idx(D / 4));
    SmallVector<Value> rows;
    for (int64_t h = 0; h < 2; ++h) {
      Value pos = arith::AddIOp::create(b, tileStart, arith::AddIOp::create(b, g, idx(8 * h)));
      Value row = kvRow(1, 3, pos, col, D / 4);
      // bf16: as D/8 pairs (i32), each a fragment register; FP8: the codes.
      rows.push_back(fp8() ? row
                           : vector::BitCastOp::create(b, VectorType::get({D / 8}, i32), row));
    }
    return rows;
  }
  // Values of the tile's keys 2t, 2t + 1, 2t + 8, 2t + 9, dims D/8 g ...
  SmallVector<Value> loadValues(Value tileStart) {
    const int64_t D = s.headDim;
    Value col = arith::MulIOp::create(b, g, idx(D / 8));
    Value t2 = arith::MulIOp::create(b, t, idx(2));
    SmallVector<Value> rows;
    for (int64_t r = 0; r < 4; ++r) {
      Value key = arith::AddIOp::create(b, t2, idx((r & 1) + 8 * (r / 2)));
      rows.push_back(kvRow(2, 4, arith::AddIOp::create(b, tileStart, key), col, D / 8));
    }
    return rows;
  }

  // One tile of 16 keys from `tileStart`: scores, the online softmax step,
  // the output update. carried: max A, max B, sum A, sum B (log2 units), the
  // output accumulators (D/8 n-tiles of c0..c3), then the tile's keys (2)
  // and values (4). Returns the same for the next tile.
  SmallVector<Value> attendTile(Value tileStart, ArrayRef<Value> carried) {
    const int64_t D = s.headDim;
    const size_t rowsAt = 4 + D / 2;
    Value keyRows[2] = {carried[rowsAt], carried[rowsAt + 1]};
    Value valueRows[4] = {carried[rowsAt + 2], carried[rowsAt + 3], carried[rowsAt + 4],
                          carried[rowsAt + 5]};
    Value next = arith::AddIOp::create(b, tileStart, idx(kTileKeys));
    Value t2 = arith::MulIOp::create(b, t, idx(2));

    // Scores, keys 8h .. 8h + 7: thread (g, t) gets rows g, g + 8 at keys
    // 8h + 2t, + 1; scaled to log2 units, -inf at or past keyEnd.
    Value scaleLog2 =
        arith::ConstantFloatOp::create(b, f32, APFloat(float(s.scale / std::log(2.0))));
    SmallVector<Value> p(8);
    Value maxA = minusInf, maxB = minusInf;
    for (int64_t h = 0; h < 2; ++h) {
      SmallVector<Value> c = {zero, zero, zero, zero};
      for (int64_t chunk = 0; chunk < D / 16; ++chunk) {
        SmallVector<Value> bFrag = keyFragment(keyRows[h], chunk);
        for (const auto *queries : {&queriesHi, &queriesLo}) {
          SmallVector<Value, 4> sum = mmaBf16(b, (*queries)[chunk], bFrag, c);
          c.assign(sum.begin(), sum.end());
        }
      }
      for (int64_t e = 0; e < 4; ++e) {
        Value key =
            arith::AddIOp::create(b, tileStart, arith::AddIOp::create(b, t2, idx(8 * h + (e & 1))));
        Value v = arith::MulFOp::create(b, c[e], scaleLog2);
        v = arith::SelectOp::create(b, cmp(arith::CmpIPredicate::ult, key, keyEnd), v, minusInf);
        p[4 * h + e] = v;
        if (e < 2)
          maxA = arith::MaxNumFOp::create(b, maxA, v);
        else
          maxB = arith::MaxNumFOp::create(b, maxB, v);
      }
    }
    SmallVector<Value> nextKeys = loadKeys(next);
    flash::SoftmaxStep step =
        flash::softmaxStep(b, maxA, maxB, carried.take_front(4), p, minusInf, zero);

    // The output: rescaled, then += P V, P split into hi and lo.
    SmallVector<Value> out(carried.begin() + 4, carried.begin() + rowsAt);
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = arith::MulFOp::create(b, out[i], (i % 4) < 2 ? step.alphaA : step.alphaB);
    SmallVector<Value> pHi, pLo;
    for (int64_t i = 0; i < 8; i += 2) {
      auto [hi, lo] = splitPair(p[i], p[i + 1]);
      pHi.push_back(hi);
      pLo.push_back(lo);
    }
    for (int64_t jd = 0; jd < D / 8; ++jd) {
      SmallVector<Value> bFrag = valueFragment(valueRows, jd);
      for (const SmallVector<Value> *a : {&pHi, &pLo}) {
        SmallVector<Value, 4> sum = mmaBf16(b, *a, bFrag, ArrayRef<Value>(out).slice(4 * jd, 4));
        std::copy(sum.begin(), sum.end(), out.begin() + 4 * jd);
      }
    }
    SmallVector<Value> result = {step.maxA, step.maxB, step.sumA, step.sumB};
    result.append(out.begin(), out.end());
    result.append(nextKeys);
    result.append(loadValues(next));
    return result;
  }

  // The partials of heads A and B (those of this KV head): acc at dims D/8
  // (2t) + jd and D/8 (2t + 1) + jd, then the max (natural units) and sum.
  void store(ValueRange carried, Value partials, Value split) {
    const int64_t D = s.headDim;
    Value sumA = flash::quadReduce(b, carried[2], false);
    Value sumB = flash::quadReduce(b, carried[3], false);
    Value ln2 = arith::ConstantFloatOp::create(b, f32, APFloat(float(std::log(2.0))));
    Value t2 = arith::MulIOp::create(b, t, idx(2));
    Value lead = cmp(arith::CmpIPredicate::eq, t, idx(0));
    for (auto [head, ok, max, sum, first] : {std::tuple{headA, okA, carried[0], sumA, 0},
                                             std::tuple{headB, okB, carried[1], sumB, 2}}) {
      auto ifOk = scf::IfOp::create(b, ok, false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOk.getThenRegion().front());
      for (int64_t jd = 0; jd < D / 8; ++jd)
        for (int64_t e = 0; e < 2; ++e) {
          Value dim = arith::AddIOp::create(
              b, arith::MulIOp::create(b, arith::AddIOp::create(b, t2, idx(e)), idx(D / 8)),
              idx(jd));
          memref::StoreOp::create(b, carried[4 + 4 * jd + first + e], partials,
                                  ValueRange{token, head, split, dim});
        }
      auto ifLead = scf::IfOp::create(b, lead, false);
      b.setInsertionPointToStart(&ifLead.getThenRegion().front());
      memref::StoreOp::create(b, arith::MulFOp::create(b, max, ln2), partials,
                              ValueRange{token, head, split, idx(D)});
      memref::StoreOp::create(b, sum, partials, ValueRange{token, head, split, idx(D + 1)});
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const kernels::AttentionShape &s;
  int64_t splits;
  kernels::SequenceLayout sequences;
  MLIRContext *ctx;
  FloatType f32, bf16;
  Type i32;
  Value g, t, past, token, kvHead, tokenPast, position, base, row0, keyBegin, keyEnd;
  std::optional<kernels::CacheRows> rows;
  Value headA, headB, okA, okB, minusInf, zero;
  SmallVector<SmallVector<Value>> queriesHi, queriesLo; // per 16 dims: four A registers
};

} // namespace

bool mmaDecodeAttentionFits(const kernels::AttentionShape &shape) {
  return (shape.cache == kernels::KvElement::BF16 || shape.cache == kernels::KvElement::FP8) &&
         shape.headDim % 16 == 0 && shape.headDim <= 256 && shape.kvHeads > 0 &&
         shape.qHeads % shape.kvHeads == 0 && shape.group() <= kRows;
}

kernels::KernelSpec mmaDecodeAttention(const kernels::AttentionShape &shape, int64_t splits,
                                       kernels::SequenceLayout sequences) {
  const std::string name = "attention_mma_decode_" + kernels::str(shape.qHeads) + "x" +
                           kernels::str(shape.kvHeads) + "x" + kernels::str(shape.headDim) +
                           (shape.window ? "_w" + kernels::str(shape.window) : "_global") + "_s" +
                           kernels::str(splits) + kernels::kvSuffix(shape) +
                           kernels::pageSuffix(shape) + kernels::batchSuffix(sequences);
  kernels::Tiling tiling;
  tiling.set("kind", "mma-decode-attention")
      .set("parallel", "tokens*kv_heads*splits")
      .set("splits", splits)
      .set("keys", kTileKeys)
      .set("window", shape.window)
      .set("kv_cache", kernels::kvElementName(shape.cache));
  if (shape.paged())
    tiling.set("page_tokens", shape.pageTokens);
  // q, k, v, the caches, [positions,] the partials[, page table]; tokens, past.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type kv = MemRefType::get({dynamic, shape.kvHeads, shape.headDim}, b.getF32Type());
    Type cache = MemRefType::get({dynamic, shape.kvHeads, shape.headDim},
                                 kernels::kvElementType(b, shape.cache));
    std::vector<Type> types = {
        MemRefType::get({dynamic, shape.qHeads, shape.headDim}, b.getF32Type()), kv, kv, cache,
        cache};
    if (sequences)
      types.push_back(MemRefType::get({dynamic}, b.getI32Type()));
    types.push_back(
        MemRefType::get({dynamic, shape.qHeads, splits, shape.headDim + 4}, b.getF32Type()));
    kernels::appendPageTable(b, shape, types);
    types.push_back(b.getI64Type());
    types.push_back(b.getI64Type());
    return types;
  };
  return kernels::buildKernel(name, "kiln.attention", tiling, args, [&](kernels::KernelScope &k) {
    DecodeAttentionBuilder(k, shape, splits, sequences).build();
  });
}

kernels::Work mmaDecodeAttentionWork(const kernels::AttentionShape &shape, int64_t splits) {
  return kernels::Work{0, 32 * shape.kvHeads * splits};
}

} // namespace kiln::nvptx
