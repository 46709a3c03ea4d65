// Built as typed IR (targets/common/KernelBuilder.h). Fragment layouts of
// mma.sync.m16n8k16 (bf16): a thread is (g, t) = (lane / 4, lane % 4); its A
// registers hold rows g and g + 8 at columns 2t, 2t + 1 and 2t + 8, 2t + 9;
// its B registers column g at rows 2t, 2t + 1 and 2t + 8, 2t + 9; its C
// values rows g (c0, c1) and g + 8 (c2, c3) at columns 2t, 2t + 1. So a
// score tile's accumulators are the next product's A fragments as they are;
// the scores' B (K^T) is pairs of neighbours in a row of the row-major key
// tile, and P V's B comes from the row-major value tile by ldmatrix.trans.
#include "targets/nvptx/MmaAttention.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/KvCacheAccess.h"
#include "targets/nvptx/DynamicShared.h"
#include "targets/nvptx/FlashSoftmax.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cmath>
#include <limits>
#include <optional>

namespace kiln::nvptx {

using namespace mlir;
using S = MmaAttentionShape;

namespace {

class MmaAttentionBuilder {
public:
  MmaAttentionBuilder(kernels::KernelScope &k, const S &shape, const std::string &smemName,
                      bool dropLastTile)
      : k(k), b(k.b), s(shape), smemName(smemName), dropLastTile(dropLastTile), ctx(b.getContext()),
        f32(b.getF32Type()), i32(b.getI32Type()), ptr3(LLVM::LLVMPointerType::get(ctx, 3)),
        acc(LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(4, b.getF32Type()))) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    // q, k, v, the caches, y[, page table]; tokens, past.
    const unsigned scalarArg = s.paged() ? 7 : 6;
    tokens = k.argIndex(scalarArg);
    past = k.argIndex(scalarArg + 1);
    // Block: (query tile, group of headsPerBlock heads); warp: a head of the
    // group and 16 of the tile's rows.
    const int64_t groups = s.qHeads / s.headsPerBlock();
    Value lane = arith::RemUIOp::create(b, tid, k.index(32));
    Value warpInBlock = arith::DivUIOp::create(b, tid, k.index(32));
    Value head = arith::AddIOp::create(
        b,
        arith::MulIOp::create(b, arith::RemUIOp::create(b, bid, k.index(groups)),
                              k.index(s.headsPerBlock())),
        arith::DivUIOp::create(b, warpInBlock, k.index(4)));
    Value warp = arith::RemUIOp::create(b, warpInBlock, k.index(4));
    Value q0 = arith::MulIOp::create(b, arith::DivUIOp::create(b, bid, k.index(groups)),
                                     k.index(S::kQueries));
    auto live = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, q0, tokens), false);
    b.setInsertionPointToStart(&live.getThenRegion().front());
    smem = LLVM::AddressOfOp::create(b, ptr3, smemName);
    this->tid = tid;
    this->head = head;
    kvHead = arith::DivUIOp::create(b, head, k.index(s.qHeads / s.kvHeads));
    g = arith::DivUIOp::create(b, lane, k.index(4));
    t = arith::RemUIOp::create(b, lane, k.index(4));
    rows.emplace(b, s, kernels::SequenceLayout{}, k.arg(3), s.paged() ? k.arg(6) : Value());

    // The keys the block's queries see: [keyBegin, keyEnd) in positions.
    Value queryEnd =
        arith::MinUIOp::create(b, arith::AddIOp::create(b, q0, k.index(S::kQueries)), tokens);
    keyEnd = arith::AddIOp::create(b, past, queryEnd);
    Value keyBegin = k.index(0);
    if (s.window > 0) {
      // past + q0 - (window - 1), or 0.
      Value first = arith::AddIOp::create(b, past, q0);
      Value reach = k.index(s.window - 1);
      keyBegin = arith::SelectOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::uge, first, reach),
          arith::SubIOp::create(b, first, reach), k.index(0));
    }
    Value span = arith::SubIOp::create(b, keyEnd, keyBegin);
    Value tiles = arith::DivUIOp::create(b, arith::AddIOp::create(b, span, k.index(S::kKeys - 1)),
                                         k.index(S::kKeys));
    if (dropLastTile)
      tiles = arith::SelectOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, tiles, k.index(1)),
          arith::SubIOp::create(b, tiles, k.index(1)), tiles);

    // The warp's rows: g and g + 8 of its 16.
    rowA = arith::AddIOp::create(
        b, arith::AddIOp::create(b, q0, arith::MulIOp::create(b, warp, k.index(16))), g);
    rowB = arith::AddIOp::create(b, rowA, k.index(8));
    posA = arith::AddIOp::create(b, past, rowA);
    posB = arith::AddIOp::create(b, past, rowB);
    loadQueries();

    // The loop carries each row's max and sum and the output accumulators.
    const double inf = std::numeric_limits<double>::infinity();
    Value minusInf = arith::ConstantFloatOp::create(b, f32, APFloat(float(-inf)));
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    SmallVector<Value> init = {minusInf, minusInf, zero, zero};
    for (int64_t i = 0; i < s.headDim / 2; ++i)
      init.push_back(zero);
    auto loop = scf::ForOp::create(b, k.index(0), tiles, k.index(1), init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value tileStart = arith::AddIOp::create(
          b, keyBegin, arith::MulIOp::create(b, loop.getInductionVar(), k.index(S::kKeys)));
      SmallVector<Value> carried(loop.getRegionIterArgs().begin(), loop.getRegionIterArgs().end());
      NVVM::Barrier0Op::create(b, b.getLoc()); // the previous tile is read
      loadTile(tileStart);
      NVVM::Barrier0Op::create(b, b.getLoc());
      scf::YieldOp::create(b, attendTile(tileStart, carried));
    }
    store(loop.getResults());
  }

private:
  Value constI32(int64_t v) { return k.i32(v); }
  Value idx(int64_t v) { return k.index(v); }

  // A shared address `elements` bf16 from the start of the region at
  // `baseBytes`.
  Value sharedAt(int64_t baseBytes, Value elements) {
    Value bytes =
        arith::AddIOp::create(b, arith::MulIOp::create(b, elements, idx(2)), idx(baseBytes));
    Value offset = arith::IndexCastOp::create(b, i32, bytes);
    return LLVM::GEPOp::create(b, ptr3, b.getI8Type(), smem, ValueRange{offset});
  }
  int64_t valuesBase() const { return S::kKeys * s.keyStride() * 2; }

  Value mma(ArrayRef<Value> a, ArrayRef<Value> bFrag, ArrayRef<Value> c) {
    return NVVM::MmaOp::create(
        b, acc, a, bFrag, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
        std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
  }
  Value element(Value structValue, int64_t i) {
    return LLVM::ExtractValueOp::create(b, structValue, ArrayRef<int64_t>{i});
  }

  // Row `row` of q at columns `col`, `col` + 1, as two f32 (zeros past T).
  Value queryPair(Value row, Value col) {
    Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, tokens);
    Value safe = arith::SelectOp::create(b, ok, row, idx(0));
    auto v2 = VectorType::get({2}, f32);
    Value pair = vector::LoadOp::create(b, v2, k.arg(0), ValueRange{safe, head, col});
    Value zeros = arith::ConstantOp::create(b, v2, DenseElementsAttr::get(v2, 0.0f));
    pair = arith::SelectOp::create(b, ok, pair, zeros);
    Value lo = vector::ExtractOp::create(b, pair, ArrayRef<int64_t>{0});
    Value hi = vector::ExtractOp::create(b, pair, ArrayRef<int64_t>{1});
    return flash::packBf16(b, lo, hi);
  }

  void loadQueries() {
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    for (int64_t kk = 0; kk < s.headDim / 16; ++kk) {
      Value c0 = arith::AddIOp::create(b, col2t, idx(16 * kk));
      Value c8 = arith::AddIOp::create(b, c0, idx(8));
      queries.push_back(
          {queryPair(rowA, c0), queryPair(rowB, c0), queryPair(rowA, c8), queryPair(rowB, c8)});
    }
  }

  // Four f32 of the key or value at position `pos` (cache below `past`, this
  // call's K/V above), dims `col` ..; zeros where `inRange` is false.
  Value kvQuad(unsigned callArg, unsigned cacheArg, Value pos, Value col, Value inRange,
               kernels::KvStorage storage) {
    auto v4 = VectorType::get({4}, f32);
    Value cached = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, pos, past);
    auto ifRange = scf::IfOp::create(b, TypeRange{v4}, inRange, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifRange.getThenRegion().front());
      auto ifCached = scf::IfOp::create(b, TypeRange{v4}, cached, true);
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&ifCached.getThenRegion().front());
        Value slot = rows->row(b, k.index(0), pos);
        scf::YieldOp::create(
            b, ValueRange{kernels::loadCachedF32(b, k.arg(cacheArg), ValueRange{slot, kvHead, col},
                                                 4, storage)});
        b.setInsertionPointToStart(&ifCached.getElseRegion().front());
        // This call's, as the cache holds them (the bf16 tile rounds a bf16
        // cache's the same way).
        Value row = arith::SubIOp::create(b, pos, past);
        Value call = vector::LoadOp::create(b, v4, k.arg(callArg), ValueRange{row, kvHead, col});
        if (storage.element == kernels::KvElement::FP8)
          call = kernels::roundAsCached(b, call, storage);
        scf::YieldOp::create(b, ValueRange{call});
      }
      scf::YieldOp::create(b, ifCached.getResults());
      b.setInsertionPointToStart(&ifRange.getElseRegion().front());
      Value zeros = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
      scf::YieldOp::create(b, ValueRange{zeros});
    }
    return ifRange.getResult(0);
  }

  // The tile's keys [64, D] and values (transposed, [D, 64]) into shared
  // memory as bf16: each thread four dims of a key at a time.
  void loadTile(Value tileStart) {
    const int64_t quads = S::kKeys * s.headDim / 4;
    auto v4bf = VectorType::get({4}, b.getBF16Type());
    for (int64_t i = 0; i < quads / s.threads(); ++i) {
      Value e = arith::AddIOp::create(b, tid, idx(i * s.threads()));
      Value key = arith::DivUIOp::create(b, e, idx(s.headDim / 4));
      Value col =
          arith::MulIOp::create(b, arith::RemUIOp::create(b, e, idx(s.headDim / 4)), idx(4));
      Value pos = arith::AddIOp::create(b, tileStart, key);
      Value inRange = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, pos, keyEnd);
      Value kq = arith::TruncFOp::create(b, v4bf, kvQuad(1, 3, pos, col, inRange, s.keys()));
      Value vq = arith::TruncFOp::create(b, v4bf, kvQuad(2, 4, pos, col, inRange, s.values()));
      Value keyAt =
          arith::AddIOp::create(b, arith::MulIOp::create(b, key, idx(s.keyStride())), col);
      LLVM::StoreOp::create(b, kq, sharedAt(0, keyAt), /*alignment=*/8);
      LLVM::StoreOp::create(b, vq, sharedAt(valuesBase(), keyAt), /*alignment=*/8);
    }
  }

  // The P V product's B fragments for keys 16 kk .. + 15 and dims 8 jd ..
  // + 7: ldmatrix.x2.trans over the row-major value tile (lanes 0-15 name
  // the keys' rows) hands each thread V[2t, 2t + 1][g] and V[8 + 2t, ..][g].
  SmallVector<Value> valueFragments(int64_t kk, int64_t jd) {
    Value lane = arith::RemUIOp::create(b, tid, idx(32));
    Value key = arith::AddIOp::create(b, arith::RemUIOp::create(b, lane, idx(16)), idx(16 * kk));
    Value at =
        arith::AddIOp::create(b, arith::MulIOp::create(b, key, idx(s.keyStride())), idx(8 * jd));
    auto pairs = LLVM::LLVMStructType::getLiteral(ctx, {i32, i32});
    Value both = NVVM::LdMatrixOp::create(
        b, pairs, sharedAt(valuesBase(), at), 2, NVVM::MMALayout::col,
        NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8), NVVM::LdStMatrixEltType::B16);
    return {element(both, 0), element(both, 1)};
  }

  Value sharedPair(int64_t baseBytes, Value elements) {
    return LLVM::LoadOp::create(b, i32, sharedAt(baseBytes, elements), /*alignment=*/4);
  }

  // One key tile: scores, the online softmax update and the output update.
  // carried: max A, max B, sum A, sum B, then the output accumulators (D/8
  // tiles of c0..c3). Returns the next carried values.
  SmallVector<Value> attendTile(Value tileStart, ArrayRef<Value> carried) {
    const int64_t keyTiles = S::kKeys / 8;
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    // Scores: 8 tiles of 8 keys.
    SmallVector<Value> scores(keyTiles);
    for (int64_t j = 0; j < keyTiles; ++j) {
      Value sum = Value();
      SmallVector<Value> c = {zero, zero, zero, zero};
      Value keyRow =
          arith::MulIOp::create(b, arith::AddIOp::create(b, g, idx(8 * j)), idx(s.keyStride()));
      for (int64_t kk = 0; kk < s.headDim / 16; ++kk) {
        Value at = arith::AddIOp::create(b, keyRow, arith::AddIOp::create(b, col2t, idx(16 * kk)));
        SmallVector<Value> bFrag = {sharedPair(0, at),
                                    sharedPair(0, arith::AddIOp::create(b, at, idx(8)))};
        sum = mma(queries[kk], bFrag, c);
        c = {element(sum, 0), element(sum, 1), element(sum, 2), element(sum, 3)};
      }
      scores[j] = sum;
    }
    // Scaled by scale * log2(e); -inf where the key is not visible.
    const double inf = std::numeric_limits<double>::infinity();
    Value minusInf = arith::ConstantFloatOp::create(b, f32, APFloat(float(-inf)));
    Value scaleLog2 =
        arith::ConstantFloatOp::create(b, f32, APFloat(float(s.scale / std::log(2.0))));
    SmallVector<Value> p(keyTiles * 4);
    Value maxA = minusInf, maxB = minusInf;
    for (int64_t j = 0; j < keyTiles; ++j)
      for (int64_t e = 0; e < 4; ++e) {
        Value key = arith::AddIOp::create(b, tileStart,
                                          arith::AddIOp::create(b, col2t, idx(8 * j + (e & 1))));
        Value query = e < 2 ? posA : posB;
        Value ok = arith::AndIOp::create(
            b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, key, keyEnd),
            arith::CmpIOp::create(b, arith::CmpIPredicate::ule, key, query));
        if (s.window > 0)
          ok = arith::AndIOp::create(
              b, ok,
              arith::CmpIOp::create(b, arith::CmpIPredicate::ugt,
                                    arith::AddIOp::create(b, key, idx(s.window)), query));
        Value v = arith::MulFOp::create(b, element(scores[j], e), scaleLog2);
        v = arith::SelectOp::create(b, ok, v, minusInf);
        p[4 * j + e] = v;
        if (e < 2)
          maxA = arith::MaxNumFOp::create(b, maxA, v);
        else
          maxB = arith::MaxNumFOp::create(b, maxB, v);
      }
    flash::SoftmaxStep step =
        flash::softmaxStep(b, maxA, maxB, carried.take_front(4), p, minusInf, zero);
    // The output: rescaled, then += P V over the tile's 64 keys.
    SmallVector<Value> out(carried.begin() + 4, carried.end());
    for (size_t i = 0; i < out.size(); ++i)
      out[i] = arith::MulFOp::create(b, out[i], (i % 4) < 2 ? step.alphaA : step.alphaB);
    for (int64_t kk = 0; kk < S::kKeys / 16; ++kk) {
      const int64_t lo = 4 * (2 * kk), hi = 4 * (2 * kk + 1);
      SmallVector<Value> a = {
          flash::packBf16(b, p[lo], p[lo + 1]), flash::packBf16(b, p[lo + 2], p[lo + 3]),
          flash::packBf16(b, p[hi], p[hi + 1]), flash::packBf16(b, p[hi + 2], p[hi + 3])};
      for (int64_t jd = 0; jd < s.headDim / 8; ++jd) {
        Value sum = mma(a, valueFragments(kk, jd), ArrayRef<Value>(out).slice(4 * jd, 4));
        for (int64_t e = 0; e < 4; ++e)
          out[4 * jd + e] = element(sum, e);
      }
    }
    SmallVector<Value> next = {step.maxA, step.maxB, step.sumA, step.sumB};
    next.append(out.begin(), out.end());
    return next;
  }

  // y rows A and B (those below T): the output over the row's sum.
  void store(ValueRange carried) {
    Value sumA = flash::quadReduce(b, carried[2], false),
          sumB = flash::quadReduce(b, carried[3], false);
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    auto v2 = VectorType::get({2}, f32);
    for (auto [row, sum, first] : {std::tuple{rowA, sumA, 0}, std::tuple{rowB, sumB, 2}}) {
      Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, tokens);
      auto ifOk = scf::IfOp::create(b, ok, false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOk.getThenRegion().front());
      Value inverse =
          arith::DivFOp::create(b, arith::ConstantFloatOp::create(b, f32, APFloat(1.0f)), sum);
      for (int64_t jd = 0; jd < s.headDim / 8; ++jd) {
        Value lo = arith::MulFOp::create(b, carried[4 + 4 * jd + first], inverse);
        Value hi = arith::MulFOp::create(b, carried[4 + 4 * jd + first + 1], inverse);
        Value col = arith::AddIOp::create(b, col2t, idx(8 * jd));
        vector::StoreOp::create(b, vector::FromElementsOp::create(b, v2, ValueRange{lo, hi}),
                                k.arg(5), ValueRange{row, head, col});
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const S &s;
  std::string smemName;
  bool dropLastTile;
  MLIRContext *ctx;
  FloatType f32;
  Type i32;
  LLVM::LLVMPointerType ptr3;
  LLVM::LLVMStructType acc;
  Value smem, tid, head, kvHead, g, t, tokens, past, keyEnd, rowA, rowB, posA, posB;
  std::optional<kernels::CacheRows> rows;
  SmallVector<SmallVector<Value>> queries; // per 16 dims: the four A registers
};

} // namespace

bool mmaAttentionFits(const S &shape) {
  return shape.headDim % 16 == 0 && shape.headDim <= 256 && shape.kvHeads > 0 &&
         shape.qHeads % shape.kvHeads == 0 && (S::kKeys * shape.headDim / 4) % shape.threads() == 0;
}

kernels::KernelSpec mmaAttention(const S &shape, bool dropLastTile) {
  const std::string name = std::string("attention_mma_") + (dropLastTile ? "broken_" : "") +
                           std::to_string(shape.qHeads) + "x" + std::to_string(shape.kvHeads) +
                           "x" + std::to_string(shape.headDim) +
                           (shape.window ? "_w" + std::to_string(shape.window) : "_global") +
                           kernels::kvSuffix(shape) + kernels::pageSuffix(shape);
  kernels::Tiling tiling;
  tiling.set("kind", "mma-attention")
      .set("queries", S::kQueries)
      .set("keys", S::kKeys)
      .set("heads", shape.headsPerBlock())
      .set("block", shape.threads());
  if (shape.cache != kernels::KvElement::F32)
    tiling.set("kv_cache", kernels::kvElementName(shape.cache));
  if (shape.paged())
    tiling.set("page_tokens", shape.pageTokens);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type q = MemRefType::get({dynamic, shape.qHeads, shape.headDim}, b.getF32Type());
    Type kv = MemRefType::get({dynamic, shape.kvHeads, shape.headDim}, b.getF32Type());
    Type kvCache = MemRefType::get({dynamic, shape.kvHeads, shape.headDim},
                                   kernels::kvElementType(b, shape.cache));
    std::vector<Type> types = {q, kv, kv, kvCache, kvCache, q};
    kernels::appendPageTable(b, shape, types);
    types.insert(types.end(), {b.getI64Type(), b.getI64Type()});
    return types;
  };
  const std::string smemName = name + "_smem";
  kernels::KernelSpec spec =
      kernels::buildKernel(name, "kiln.attention", tiling, args, [&](kernels::KernelScope &scope) {
        declareDynamicShared(scope, smemName, /*alignment=*/16);
        kernels::boundLaunch(scope, shape.threads());
        MmaAttentionBuilder(scope, shape, smemName, dropLastTile).build();
      });
  spec.sharedBytes = shape.sharedBytes();
  return spec;
}

kernels::Work mmaAttentionWork(const S &shape, int64_t maxTokens) {
  const int64_t blocks =
      (maxTokens + S::kQueries - 1) / S::kQueries * (shape.qHeads / shape.headsPerBlock());
  return kernels::Work{blocks * shape.threads(), 0, shape.threads()};
}

} // namespace kiln::nvptx
