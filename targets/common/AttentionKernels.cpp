// Attention over the KV cache (the rotary embedding before it is a row stage,
// HeadRowKernels.h). The attention kernel serves prefill and decode alike: queries at positions
// past .. past+T-1 attend to the cached positions still in their window and to the new tokens up to
// themselves (online softmax), then the new K/V are written to the cache (a ring of `window` slots
// for sliding layers). Launch parts split the KV heads, so a part only reads and writes its own
// heads' cache. The batched variant (decode_batch) gives token t conversation t's caches and
// position (Generators.h).
// Built as typed IR (KernelBuilder.h).
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KvCacheAccess.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <limits>

namespace kiln::kernels {

using namespace mlir;

KernelSpec attention(const AttentionShape &shape, SequenceLayout sequences) {
  const int64_t qHeads = shape.qHeads, kvHeads = shape.kvHeads, headDim = shape.headDim;
  const int64_t window = shape.window;
  const double scale = shape.scale;
  const KvElement cache = shape.cache;
  std::string name = "attention_" + std::to_string(qHeads) + "x" + std::to_string(kvHeads) + "x" +
                     std::to_string(headDim) +
                     (window ? "_w" + std::to_string(window) : "_global") + kvSuffix(shape) +
                     pageSuffix(shape) + batchSuffix(sequences);
  const int64_t lanes = headDim % 16 == 0 ? 16 : 1;
  Tiling tiling;
  tiling.set("kind", "online-softmax")
      .set("lanes", lanes)
      .set("parallel", "kv_heads")
      .set("window", window);
  if (cache != KvElement::F32)
    tiling.set("kv_cache", kvElementName(cache));
  if (shape.paged())
    tiling.set("page_tokens", shape.pageTokens);
  // q, k, v, k cache, v cache[, positions], out[, page table]; tokens, past.
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type q = MemRefType::get({dynamic, qHeads, headDim}, b.getF32Type());
    Type kv = MemRefType::get({dynamic, kvHeads, headDim}, b.getF32Type());
    Type kvCache = MemRefType::get({dynamic, kvHeads, headDim}, kvElementType(b, cache));
    std::vector<Type> types = {q, kv, kv, kvCache, kvCache};
    if (sequences)
      types.push_back(MemRefType::get({dynamic}, b.getI32Type()));
    types.push_back(q);
    appendPageTable(b, shape, types);
    types.insert(types.end(), {b.getI64Type(), b.getI64Type()});
    return types;
  };
  return buildKernel(name, "kiln.attention", tiling, args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    auto vf = VectorType::get({lanes}, f32);
    const unsigned positionsArg = 5, outArg = sequences ? 6 : 5;
    const unsigned scalarArg = outArg + (shape.paged() ? 2 : 1);
    Value q = s.arg(0), k = s.arg(1), v = s.arg(2), kc = s.arg(3), vc = s.arg(4);
    Value positions = sequences ? s.arg(positionsArg) : Value();
    Value out = s.arg(outArg);
    Value c0 = s.index(0), c1 = s.index(1), step = s.index(lanes), dim = s.index(headDim);
    Value group = s.index(qHeads / kvHeads), kvHeadsC = s.index(kvHeads);
    Value windowC = s.index(window);
    Value scaleC = arith::ConstantFloatOp::create(b, f32, APFloat(float(scale)));
    Value negInf =
        arith::ConstantFloatOp::create(b, f32, APFloat(-std::numeric_limits<float>::infinity()));
    Value zeroF = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value oneF = arith::ConstantFloatOp::create(b, f32, APFloat(1.0f));
    Value tCount = s.argIndex(scalarArg);
    Value past = s.argIndex(scalarArg + 1);
    // Where a conversation's positions are in the caches.
    const CacheRows rows(b, shape, sequences, kc, shape.paged() ? s.arg(outArg + 1) : Value());
    Value acc = memref::AllocaOp::create(b, MemRefType::get({headDim}, f32));
    Value zeroD = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
    auto forRange = [&](Value lo, Value hi, ValueRange init = {}) {
      return scf::ForOp::create(b, lo, hi, c1, init);
    };
    auto forDims = [&](function_ref<void(Value)> body) {
      auto loop = scf::ForOp::create(b, c0, dim, step);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      body(loop.getInductionVar());
    };

    Value kvh = forEachRowOfPart(s, kvHeadsC);
    {
      OpBuilder::InsertionGuard headGuard(b);
      auto g = forRange(c0, group);
      b.setInsertionPointToStart(g.getBody());
      Value hb = arith::MulIOp::create(b, kvh, group);
      Value h = arith::AddIOp::create(b, hb, g.getInductionVar());
      auto tLoop = forRange(c0, tCount);
      b.setInsertionPointToStart(tLoop.getBody());
      Value t = tLoop.getInductionVar();
      // The token's conversation: its past, position, cache base and row.
      TokenState state = tokenState(b, sequences, positions, past, t, rows.stride(), c0);
      Value pastT = state.past, p = state.position, baseT = state.base, row0 = state.row0;
      // First visible position: p - window + 1 for sliding layers, 0 for global.
      Value p1 = arith::AddIOp::create(b, p, c1);
      Value loW = arith::SubIOp::create(b, p1, windowC);
      Value isGlobal = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, windowC, c0);
      Value loS = arith::MaxSIOp::create(b, loW, c0);
      Value lo = arith::SelectOp::create(b, isGlobal, c0, loS);
      forDims([&](Value d) { vector::StoreOp::create(b, zeroD, acc, ValueRange{d}); });
      // One key: score, online-softmax update of (max, sum) and of the
      // output accumulator, the key and value at `row` of K and V (the
      // cache's, or this call's rounded as the cache holds them).
      auto update = [&](scf::ForOp loop, Value K, Value V, Value row, bool cached) {
        auto load = [&](Value from, ValueRange at, KvStorage storage) -> Value {
          if (cached)
            return loadCachedF32(b, from, at, lanes, storage);
          return roundAsCached(b, vector::LoadOp::create(b, vf, from, at), storage);
        };
        Value m = loop.getRegionIterArgs()[0], l = loop.getRegionIterArgs()[1];
        Value zeroV = arith::ConstantOp::create(b, vf, DenseElementsAttr::get(vf, 0.0f));
        auto dotv = scf::ForOp::create(b, c0, dim, step, ValueRange{zeroV});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(dotv.getBody());
          Value d = dotv.getInductionVar();
          Value qv = vector::LoadOp::create(b, vf, q, ValueRange{t, h, d});
          Value kvv = load(K, ValueRange{row, kvh, d}, shape.keys());
          Value pr = arith::MulFOp::create(b, qv, kvv);
          Value ns = arith::AddFOp::create(b, dotv.getRegionIterArgs()[0], pr);
          scf::YieldOp::create(b, ValueRange{ns});
        }
        Value dot = vector::ReductionOp::create(b, vector::CombiningKind::ADD, dotv.getResult(0));
        Value score = arith::MulFOp::create(b, dot, scaleC);
        Value mNew = arith::MaximumFOp::create(b, m, score);
        Value dm = arith::SubFOp::create(b, m, mNew);
        Value corr = math::ExpOp::create(b, dm);
        Value ds = arith::SubFOp::create(b, score, mNew);
        Value pw = math::ExpOp::create(b, ds);
        Value lC = arith::MulFOp::create(b, l, corr);
        Value lNew = arith::AddFOp::create(b, lC, pw);
        Value corrV = vector::BroadcastOp::create(b, vf, corr);
        Value pwV = vector::BroadcastOp::create(b, vf, pw);
        forDims([&](Value d) {
          Value av = vector::LoadOp::create(b, vf, acc, ValueRange{d});
          Value vv = load(V, ValueRange{row, kvh, d}, shape.values());
          Value ac = arith::MulFOp::create(b, av, corrV);
          Value pv = arith::MulFOp::create(b, vv, pwV);
          Value an = arith::AddFOp::create(b, ac, pv);
          vector::StoreOp::create(b, an, acc, ValueRange{d});
        });
        scf::YieldOp::create(b, ValueRange{mNew, lNew});
      };
      Value loCached = arith::MinUIOp::create(b, lo, pastT);
      auto ml0 = forRange(loCached, pastT, ValueRange{negInf, zeroF});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ml0.getBody());
        update(ml0, kc, vc, rows.row(b, baseT, ml0.getInductionVar()), /*cached=*/true);
      }
      // This call's keys from position pastT up to the query's own: rows
      // row0 + (position - pastT) of k and v.
      Value loNewS = arith::SubIOp::create(b, lo, pastT);
      Value loNew = arith::MaxSIOp::create(b, loNewS, c0);
      Value pEnd = arith::AddIOp::create(b, p, c1);
      Value tEnd = arith::SubIOp::create(b, pEnd, pastT);
      auto ml = forRange(loNew, tEnd, ml0.getResults());
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ml.getBody());
        Value t2 = arith::AddIOp::create(b, row0, ml.getInductionVar());
        update(ml, k, v, t2, /*cached=*/false);
      }
      Value inv = arith::DivFOp::create(b, oneF, ml.getResult(1));
      Value invV = vector::BroadcastOp::create(b, vf, inv);
      forDims([&](Value d) {
        Value av = vector::LoadOp::create(b, vf, acc, ValueRange{d});
        Value o = arith::MulFOp::create(b, av, invV);
        vector::StoreOp::create(b, o, out, ValueRange{t, h, d});
      });
    }
    // The new tokens' K/V into the cache, in order (in a ring, later ones win).
    auto append = forRange(c0, tCount);
    b.setInsertionPointToStart(append.getBody());
    Value t2 = append.getInductionVar();
    Value slot;
    if (sequences || rows.paged()) {
      TokenState at = tokenState(b, sequences, positions, past, t2, rows.stride(), c0);
      slot = rows.row(b, at.base, at.position);
    } else {
      Value pp = arith::AddIOp::create(b, past, t2);
      slot = arith::RemUIOp::create(b, pp, rows.slots());
    }
    forDims([&](Value d) {
      Value kv1 = vector::LoadOp::create(b, vf, k, ValueRange{t2, kvh, d});
      storeToCache(b, kv1, kc, ValueRange{slot, kvh, d}, shape.keys());
      Value vv1 = vector::LoadOp::create(b, vf, v, ValueRange{t2, kvh, d});
      storeToCache(b, vv1, vc, ValueRange{slot, kvh, d}, shape.values());
    });
  });
}

} // namespace kiln::kernels
