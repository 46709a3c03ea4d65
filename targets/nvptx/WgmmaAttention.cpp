// Built as typed IR (targets/common/KernelBuilder.h) over WgmmaPipeline.h.
//
// Shared memory: the ring's stages (A: the key tile, B: the value tile, each
// D / 64 panels of 64 key rows of 128 bytes, as a TMA box brings them from
// the staged K/V or a bf16 cache; the P V products read B MN-major), then its
// barriers, every tile in the 128-byte swizzle: 16-byte chunk c of row r at
// chunk c ^ (r % 8), rows of 128 bytes, 1024-byte atoms. Neither operand A
// is in shared memory: each consumer holds its queries in registers (the
// scores' A, loaded once), and the probabilities (P V's A) where the scores
// were, so the tensor cores read only the key and value tiles from it.
//
// The accumulators of m64nNk16: thread (warp w, lane l) of a warpgroup holds,
// for each 8 columns j, rows 16 w + l / 4 ("A") and 8 below ("B") at
// columns 8 j + 2 (l % 4) and the next, registers 4 j .. 4 j + 3 (A, A, B,
// B). The scores' columns are keys; the same thread's registers of the A
// operand of m64nNk16 hold rows A and B at k 2 (l % 4) and 8 further, so the
// probabilities become P V's A operand where they are, packed as bf16 pairs.
// The queries' A registers (m64n64k16's A, k 16 kk ..): rows A and B at
// dims 16 kk + 2 (l % 4) and 8 further, as bf16 pairs.
#include "targets/nvptx/WgmmaAttention.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/KvCacheAccess.h"
#include "targets/nvptx/FlashSoftmax.h"
#include "targets/nvptx/WgmmaPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace kiln::nvptx {

using namespace mlir;
using S = WgmmaAttentionShape;

namespace {

constexpr int64_t kThreads = 3 * wgmma::kWarpgroup; // producer + two consumers
constexpr int64_t kConsumerWarps = 8;
// The staging kernel's block: a multiple of 32 that divides its threads a
// row (kvHeads * head_dim / 4), at most 128; 0 if none.
int64_t stageBlock(int64_t quads) {
  for (int64_t block : {128, 96, 64, 32})
    if (quads % block == 0)
      return block;
  return 0;
}
constexpr int64_t kRows = wgmma::kConsumerRows; // a consumer's 64 query rows

// The registers of the producer's and the consumers' threads, and how many
// of the producer's hold a converted tile's loads at once. The consumers
// hold the output (D / 2), the scores (N / 2), the probabilities (N / 4)
// and the queries (D / 4): at 64 keys the producer converts a whole tile's
// chunks at once; at 128 the consumers take nearly all (192 at D = 128) and
// the producer converts 16 registers of loads at a time.
struct Registers {
  uint32_t producer, consumer;
  int64_t loadsInFlight;
};
Registers registersFor(const S &s) {
  constexpr Registers narrow{136, 184, 64}, wide{40, 232, 16};
  static_assert(wgmma::registersFit(narrow.producer, narrow.consumer));
  static_assert(wgmma::registersFit(wide.producer, wide.consumer));
  return s.tileKeys() == 128 ? wide : narrow;
}

// A key or value panel: the tile's rows of 64 dims (128 bytes).
int64_t panelBytes(const S &s) { return s.tileKeys() * wgmma::kRowBytes; }

wgmma::RingLayout ringLayout(const S &s) {
  return wgmma::RingLayout{s.stages(), s.tileKeys() * s.panels(), s.tileKeys() * s.panels()};
}

class WgmmaAttentionBuilder {
public:
  WgmmaAttentionBuilder(kernels::KernelScope &k, const S &shape, const std::string &smemName,
                        bool dropLastTile, bool bf16Output)
      : k(k), b(k.b), s(shape), smemName(smemName), dropLastTile(dropLastTile),
        bf16Output(bf16Output), ctx(b.getContext()), f32(b.getF32Type()), i32(b.getI32Type()),
        scoresType(LLVM::LLVMStructType::getLiteral(
            ctx, SmallVector<Type>(kRows * shape.tileKeys() / wgmma::kWarpgroup, f32))),
        outputType(LLVM::LLVMStructType::getLiteral(
            ctx, SmallVector<Type>(kRows * shape.headDim / wgmma::kWarpgroup, f32))) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    // q, k, v, the caches, y, the staged keys and values[, page table];
    // tokens, past, the tensor maps.
    scalarArg = s.paged() ? 9 : 8;
    tokens = k.argIndex(scalarArg);
    past = k.argIndex(scalarArg + 1);
    // The last query blocks first: a causal block's work grows with its
    // queries' positions, so the longest start first and the short ones fill
    // the machine's tail. The grid covers the entry's most tokens; blocks
    // past this call's exit.
    unit = arith::RemUIOp::create(b, bid, k.index(s.headUnits()));
    Value queryBlock = arith::DivUIOp::create(b, bid, k.index(s.headUnits()));
    Value queryBlocks =
        arith::DivUIOp::create(b, arith::AddIOp::create(b, tokens, k.index(s.blockQueries() - 1)),
                               k.index(s.blockQueries()));
    auto live = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, queryBlock, queryBlocks), false);
    b.setInsertionPointToStart(&live.getThenRegion().front());
    q0 = arith::MulIOp::create(
        b, arith::SubIOp::create(b, arith::SubIOp::create(b, queryBlocks, k.index(1)), queryBlock),
        k.index(s.blockQueries()));
    wgmma::Ring ring(k, ringLayout(s), smemName);
    // Full: each of the producer's threads once its stores are fenced;
    // empty: each consumer warp once its products have read the stage.
    ring.initBarriers(tid, wgmma::kWarpgroup, kConsumerWarps);
    Value firstHead = s.pairHeads() ? arith::MulIOp::create(b, unit, k.index(2)).getResult() : unit;
    kvHead = arith::DivUIOp::create(b, firstHead, k.index(s.group()));
    rows.emplace(b, s, kernels::SequenceLayout{}, k.arg(3), s.paged() ? k.arg(8) : Value());

    // The keys the block's queries see: [keyBegin, keyEnd) in positions.
    Value queryEnd =
        arith::MinUIOp::create(b, arith::AddIOp::create(b, q0, k.index(s.blockQueries())), tokens);
    keyEnd = arith::AddIOp::create(b, past, queryEnd);
    keyBegin = k.index(0);
    if (s.window > 0) {
      Value first = arith::AddIOp::create(b, past, q0);
      Value reach = k.index(s.window - 1);
      keyBegin = arith::SelectOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::uge, first, reach),
          arith::SubIOp::create(b, first, reach), k.index(0));
    }
    // Tiles on a grid of 64 keys from `past`, so that none straddles the
    // cache and this call (each comes whole from one): cacheTiles tiles below past
    // (the first may start below position 0: index arithmetic wraps, and
    // such keys are past keyEnd, hence masked), then this call's.
    const int64_t keys = s.tileKeys();
    Value below = cmp(arith::CmpIPredicate::ult, keyBegin, past);
    Value cacheSpan = arith::SubIOp::create(b, past, arith::MinUIOp::create(b, keyBegin, past));
    cacheTiles =
        arith::DivUIOp::create(b, arith::AddIOp::create(b, cacheSpan, idx(keys - 1)), idx(keys));
    Value callSkip = arith::MulIOp::create(
        b,
        arith::DivUIOp::create(
            b, arith::SubIOp::create(b, arith::MaxUIOp::create(b, keyBegin, past), past),
            idx(keys)),
        idx(keys));
    keyBegin = arith::SelectOp::create(
        b, below, arith::SubIOp::create(b, past, arith::MulIOp::create(b, cacheTiles, idx(keys))),
        arith::AddIOp::create(b, past, callSkip));
    Value span = arith::SubIOp::create(b, keyEnd, keyBegin);
    tiles =
        arith::DivUIOp::create(b, arith::AddIOp::create(b, span, k.index(keys - 1)), k.index(keys));
    if (dropLastTile)
      tiles = arith::SelectOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, tiles, k.index(1)),
          arith::SubIOp::create(b, tiles, k.index(1)), tiles);

    const Registers registers = registersFor(s);
    wgmma::splitRoles(
        k, tid, registers.producer, registers.consumer,
        [&](Value inGroup) { produce(ring, inGroup); },
        [&](Value consumer, Value inGroup) { consume(ring, consumer, inGroup); });
  }

private:
  Value idx(int64_t v) { return k.index(v); }
  Value cmp(arith::CmpIPredicate p, Value x, Value y) { return arith::CmpIOp::create(b, p, x, y); }

  // --- the producer ---------------------------------------------------------

  // The address of a kernel argument's data as an index (the runtime's
  // buffers have no offset), for loads through global pointers: they may
  // pass the shared stores between them (generic pointers may not), so that
  // a thread's loads are all in flight at once, and they use the read-only
  // path.
  Value globalBase(unsigned arg) {
    return memref::ExtractAlignedPointerAsIndexOp::create(b, k.arg(arg));
  }
  Value loadGlobal(Type type, Value base, Value elementIndex, int64_t elementBytes,
                   unsigned alignment = 16) {
    Value bytes =
        arith::AddIOp::create(b, base, arith::MulIOp::create(b, elementIndex, idx(elementBytes)));
    Value address = arith::IndexCastOp::create(b, b.getI64Type(), bytes);
    Value ptr = LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(ctx, 1), address);
    return LLVM::LoadOp::create(b, type, ptr, alignment, /*isVolatile=*/false,
                                /*isNonTemporal=*/false, /*isInvariant=*/true);
  }

  // The cache slot of the tile's key `rowInTile`: the tile's first slot
  // (one division a tile) plus the row, wrapped once; the ring holds at
  // least a tile's keys (a sliding window of 64 or more, a global cache of
  // more than the entry's 128 tokens). No 64-bit division a row: LLVM would
  // branch around each one.
  //
  // Paged, the row's page from the table: a position not below `past` (one
  // that wrapped below 0) reads position 0's, which exists, and is dropped.
  Value slotOf(Value rowInTile) {
    if (rows->paged()) {
      Value pos = arith::AddIOp::create(b, tileStart, rowInTile);
      Value safe =
          arith::SelectOp::create(b, cmp(arith::CmpIPredicate::ult, pos, past), pos, idx(0));
      return rows->row(b, idx(0), safe);
    }
    Value slot = arith::AddIOp::create(b, tileSlot, rowInTile);
    Value slots = rows->slots();
    return arith::SelectOp::create(b, cmp(arith::CmpIPredicate::uge, slot, slots),
                                   arith::SubIOp::create(b, slot, slots), slot);
  }

  // Four f32 of the key or value at tile row `rowInTile`, dims `col` ..: from the
  // cache below `past`, from this call's K/V above, zeros at or past keyEnd
  // (read from the cache's slot 0, which always exists, and dropped). One
  // load whatever the source, with no branch.
  //
  // Only tiles below `past` are converted (the call's come staged), so their
  // keys in range are all cached ones: a bf16 cache, whose elements are not
  // the call's f32, is read alone.
  Value kvQuad(Value callBase, Value cacheBase, Value rowInTile, Value col) {
    auto v4 = VectorType::get({4}, f32);
    if (s.cache == kernels::KvElement::BF16)
      return arith::ExtFOp::create(b, v4, cachedAsStored(cacheBase, rowInTile, col, 4));
    Value pos = arith::AddIOp::create(b, tileStart, rowInTile);
    Value inRange = cmp(arith::CmpIPredicate::ult, pos, keyEnd);
    Value cached = cmp(arith::CmpIPredicate::ult, pos, past);
    Value fromCache = arith::OrIOp::create(
        b, cached, arith::XOrIOp::create(b, inRange, arith::ConstantIntOp::create(b, 1, 1)));
    Value row = arith::SelectOp::create(
        b, inRange,
        arith::SelectOp::create(b, cached, slotOf(rowInTile), arith::SubIOp::create(b, pos, past)),
        idx(0));
    Value base = arith::SelectOp::create(b, fromCache, cacheBase, callBase);
    Value element = arith::AddIOp::create(
        b,
        arith::MulIOp::create(
            b, arith::AddIOp::create(b, arith::MulIOp::create(b, row, idx(s.kvHeads)), kvHead),
            idx(s.headDim)),
        col);
    Value quad = loadGlobal(v4, base, element, 4);
    Value zeros = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    return arith::SelectOp::create(b, inRange, quad, zeros);
  }

  // `lanes` elements of a bf16 or FP8 cache at tile row `rowInTile`, dims
  // `col` .., as stored; zeros (0.0 in both) at or past keyEnd.
  Value cachedAsStored(Value cacheBase, Value rowInTile, Value col, int64_t lanes) {
    Value pos = arith::AddIOp::create(b, tileStart, rowInTile);
    Value inRange = cmp(arith::CmpIPredicate::ult, pos, keyEnd);
    Value row = arith::SelectOp::create(b, inRange, slotOf(rowInTile), idx(0));
    Value element = arith::AddIOp::create(
        b,
        arith::MulIOp::create(
            b, arith::AddIOp::create(b, arith::MulIOp::create(b, row, idx(s.kvHeads)), kvHead),
            idx(s.headDim)),
        col);
    const int64_t bytes = kernels::kvElementBytes(s.cache);
    auto type = VectorType::get({lanes}, kernels::kvElementType(b, s.cache));
    Value stored = loadGlobal(type, cacheBase, element, bytes, bytes * lanes);
    Value zeros = arith::ConstantOp::create(b, type, b.getZeroAttr(type));
    return arith::SelectOp::create(b, inRange, stored, zeros);
  }

  // Eight f32 as eight bf16, as four i32 for one 16-byte store.
  Value chunkOf(ArrayRef<Value> values) {
    auto v8 = VectorType::get({8}, f32);
    Value all = vector::FromElementsOp::create(b, v8, values);
    Value bf = arith::TruncFOp::create(b, VectorType::get({8}, b.getBF16Type()), all);
    return vector::BitCastOp::create(b, VectorType::get({4}, i32), bf);
  }
  SmallVector<Value> elements(Value quad) {
    SmallVector<Value> out;
    for (int64_t e = 0; e < 4; ++e)
      out.push_back(vector::ExtractOp::create(b, quad, ArrayRef<int64_t>{e}));
    return out;
  }
  // The swizzled byte offset of chunk `chunk` of row `row` of a tile at
  // `base` (rows of 128 bytes).
  Value swizzled(Value base, Value row, Value chunk) {
    Value c = arith::XOrIOp::create(b, chunk, arith::RemUIOp::create(b, row, idx(8)));
    return arith::AddIOp::create(
        b, base,
        arith::AddIOp::create(b, arith::MulIOp::create(b, row, idx(wgmma::kRowBytes)),
                              arith::MulIOp::create(b, c, idx(16))));
  }

  // Whether the producer may bring cached tiles by TMA: a bf16 cache, over
  // which the kernel takes two more tensor maps.
  bool mapsCache() const { return s.cache == kernels::KvElement::BF16; }

  // A tile wholly in this call comes by TMA from the staged keys and values;
  // one below `past` from a bf16 cache by TMA too where its slots are whole
  // (no wrap of a sliding ring, nothing below position 0); any other is
  // converted by every thread.
  void produce(wgmma::Ring &ring, Value inGroup) {
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    auto mapArg = [&](unsigned arg) { return LLVM::IntToPtrOp::create(b, ptr, k.arg(arg)); };
    Value keysMap = mapArg(scalarArg + 2), valuesMap = mapArg(scalarArg + 3);
    Value keyCacheMap, valueCacheMap;
    if (mapsCache()) {
      keyCacheMap = mapArg(scalarArg + 4);
      valueCacheMap = mapArg(scalarArg + 5);
    }
    Value issuer = cmp(arith::CmpIPredicate::eq, inGroup, idx(0));
    {
      auto ifIssuer = scf::IfOp::create(b, issuer, false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
      for (Value map : {keysMap, valuesMap, keyCacheMap, valueCacheMap})
        if (map)
          ring.acquireTensorMap(map);
    }
    Value keys = globalBase(1), values = globalBase(2);
    Value keyCache = globalBase(3), valueCache = globalBase(4);
    auto loop = scf::ForOp::create(b, idx(0), tiles, idx(1));
    b.setInsertionPointToStart(loop.getBody());
    Value step = loop.getInductionVar();
    tileStart =
        arith::AddIOp::create(b, keyBegin, arith::MulIOp::create(b, step, idx(s.tileKeys())));
    if (!rows->paged())
      tileSlot = arith::RemUIOp::create(b, tileStart, rows->slots());
    auto [stage, fullAt] = ring.claim(step);
    Tile tile{issuer, fullAt, arith::MulIOp::create(b, stage, idx(ring.layout().aBytes())),
              ring.bOffset(stage)};
    auto staged =
        scf::IfOp::create(b, cmp(arith::CmpIPredicate::uge, step, cacheTiles), /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&staged.getThenRegion().front());
      bring(ring, tile, keysMap, valuesMap, {arith::SubIOp::create(b, tileStart, past), kvHead});
    }
    b.setInsertionPointToStart(&staged.getElseRegion().front());
    const Sources sources{keys, values, keyCache, valueCache};
    if (!mapsCache()) {
      convertTile(ring, inGroup, tile, sources);
      return;
    }
    // Whole: its slots one run of the cache, within a conversation's ring
    // (unpaged) or within one page (paged, the page's rows then found).
    Value run =
        rows->paged()
            ? arith::AddIOp::create(b, arith::RemUIOp::create(b, tileStart, idx(s.pageTokens)),
                                    idx(s.tileKeys()))
            : arith::AddIOp::create(b, tileSlot, idx(s.tileKeys()));
    Value whole = arith::AndIOp::create(
        b, cmp(arith::CmpIPredicate::ult, tileStart, past),
        cmp(arith::CmpIPredicate::ule, run, rows->paged() ? idx(s.pageTokens) : rows->slots()));
    auto cached = scf::IfOp::create(b, whole, /*withElse=*/true);
    b.setInsertionPointToStart(&cached.getThenRegion().front());
    bring(ring, tile, keyCacheMap, valueCacheMap,
          {kvHead, rows->paged() ? rows->row(b, idx(0), tileStart) : tileSlot});
    b.setInsertionPointToStart(&cached.getElseRegion().front());
    convertTile(ring, inGroup, tile, sources);
  }

  // A ring stage being filled: the producer's issuing thread, the stage's
  // full barrier, its key and value tiles' byte offsets.
  struct Tile {
    Value issuer, fullAt, keysAt, valuesAt;
  };
  // The issuer has the TMA bring the tile's key and value panels (boxes of
  // 64 dims by 64 rows at `outer`, the coordinates after the dims', innermost
  // first); the producer's other threads arrive at once.
  void bring(wgmma::Ring &ring, const Tile &tile, Value keysMap, Value valuesMap,
             ArrayRef<Value> outer) {
    OpBuilder::InsertionGuard guard(b);
    auto ifIssuer = scf::IfOp::create(b, tile.issuer, /*withElse=*/true);
    b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
    ring.expectBytes(tile.fullAt, ring.layout().stageBytes());
    for (int64_t p = 0; p < s.panels(); ++p) {
      Value panel = idx(p * panelBytes(s));
      ring.copy(ring.at(arith::AddIOp::create(b, tile.keysAt, panel)), keysMap,
                k.i32(p * S::kPanel), outer, tile.fullAt);
      ring.copy(ring.at(arith::AddIOp::create(b, tile.valuesAt, panel)), valuesMap,
                k.i32(p * S::kPanel), outer, tile.fullAt);
    }
    b.setInsertionPointToStart(&ifIssuer.getElseRegion().front());
    NVVM::MBarrierArriveOp::create(b, b.getLoc(), Type(), tile.fullAt, Value(),
                                   NVVM::MemScopeKind::CTA, false);
  }

  struct Sources {
    Value keys, values, keyCache, valueCache;
  };
  void convertTile(wgmma::Ring &ring, Value inGroup, const Tile &tile, const Sources &src) {
    convertRows(ring, inGroup, src.keys, src.keyCache, tile.keysAt, s.keys());
    convertRows(ring, inGroup, src.values, src.valueCache, tile.valuesAt, s.values());
    NVVM::FenceProxyOp::create(b, b.getLoc(), NVVM::ProxyKind::async_shared,
                               NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
    NVVM::MBarrierArriveOp::create(b, b.getLoc(), Type(), tile.fullAt, Value(),
                                   NVVM::MemScopeKind::CTA, false);
  }

  // The tile's keys (or values) into its panels at `at`, as a TMA box would
  // bring them: chunk (key r, dims 8 c ..) a unit, consecutive threads along
  // a row; eight f32 dims (lo, hi) to convert, from a bf16 cache the eight
  // as stored (one 16-byte load), from an FP8 cache their eight codes (one
  // 8-byte load, decoded and scaled after the loads). The thread's chunks go
  // in batches of at most Registers::loadsInFlight registers of loads, each
  // batch's loads issued before its first store.
  void convertRows(wgmma::Ring &ring, Value inGroup, Value callBase, Value cacheBase, Value at,
                   kernels::KvStorage storage) {
    const int64_t chunksPerRow = s.headDim / 8;
    const int64_t chunks = s.tileKeys() * chunksPerRow / wgmma::kWarpgroup;
    const int64_t loadRegisters = s.cache == kernels::KvElement::F32    ? 8
                                  : s.cache == kernels::KvElement::BF16 ? 4
                                                                        : 2;
    const int64_t batch = std::min(chunks, registersFor(s).loadsInFlight / loadRegisters);
    for (int64_t first = 0; first < chunks; first += batch)
      convertChunks(ring, inGroup, callBase, cacheBase, at, storage, first,
                    std::min(chunks, first + batch));
  }
  // Chunks [first, end) of the thread's: their loads, then their stores.
  void convertChunks(wgmma::Ring &ring, Value inGroup, Value callBase, Value cacheBase, Value at,
                     kernels::KvStorage storage, int64_t first, int64_t end) {
    const int64_t chunksPerRow = s.headDim / 8;
    struct Chunk {
      Value lo, hi, stored, codes, at;
    };
    SmallVector<Chunk> chunks;
    for (int64_t i = first; i < end; ++i) {
      Value e = arith::AddIOp::create(b, inGroup, idx(i * wgmma::kWarpgroup));
      Value c = arith::RemUIOp::create(b, e, idx(chunksPerRow));
      Value r = arith::DivUIOp::create(b, e, idx(chunksPerRow));
      Value col = arith::MulIOp::create(b, c, idx(8));
      Chunk chunk;
      if (s.cache == kernels::KvElement::BF16) {
        chunk.stored = vector::BitCastOp::create(b, VectorType::get({4}, i32),
                                                 cachedAsStored(cacheBase, r, col, 8));
      } else if (s.cache == kernels::KvElement::FP8) {
        // Eight codes (one 8-byte load), decoded and scaled when stored.
        chunk.codes = cachedAsStored(cacheBase, r, col, 8);
      } else {
        chunk.lo = kvQuad(callBase, cacheBase, r, col);
        chunk.hi = kvQuad(callBase, cacheBase, r, arith::AddIOp::create(b, col, idx(4)));
      }
      Value panelAt = arith::AddIOp::create(
          b, at,
          arith::MulIOp::create(b, arith::DivUIOp::create(b, c, idx(8)), idx(panelBytes(s))));
      chunk.at = swizzled(panelAt, r, arith::RemUIOp::create(b, c, idx(8)));
      chunks.push_back(chunk);
    }
    for (const Chunk &chunk : chunks) {
      Value packed = chunk.stored;
      if (chunk.codes) {
        Value f8 = kernels::widenCached(b, chunk.codes, storage);
        packed = vector::BitCastOp::create(
            b, VectorType::get({4}, i32),
            arith::TruncFOp::create(b, VectorType::get({8}, b.getBF16Type()), f8));
      } else if (!packed) {
        SmallVector<Value> values = elements(chunk.lo);
        values.append(elements(chunk.hi));
        packed = chunkOf(values);
      }
      LLVM::StoreOp::create(b, packed, ring.at(chunk.at), /*alignment=*/16);
    }
  }

  // --- the consumers --------------------------------------------------------

  Value element(Value structValue, int64_t i) {
    return LLVM::ExtractValueOp::create(b, structValue, ArrayRef<int64_t>{i});
  }
  Value descriptor(Value baseBytes, int64_t advance, wgmma::Ring &ring) {
    Value addr = arith::AddIOp::create(b, ring.shared32(ring.at(baseBytes)), k.i32(advance));
    return wgmma::matrixDescriptor(b, addr);
  }

  // The consumer's queries as the scores' A operand (zeros past T): for
  // each 16 dims, four bf16 pairs (rows A and B at dims 2t, 2t + 1, then 8
  // further), read once as f32 pairs.
  SmallVector<Value> loadQueries() {
    auto v2 = VectorType::get({2}, f32);
    Value queries = globalBase(0);
    Value zeros = arith::ConstantOp::create(b, v2, DenseElementsAttr::get(v2, 0.0f));
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    SmallVector<Value> pairs;
    for (int64_t kk = 0; kk < s.headDim / wgmma::kMmaK; ++kk)
      for (int64_t half = 0; half < 2; ++half)
        for (Value row : {rowA, rowB}) {
          Value ok = cmp(arith::CmpIPredicate::ult, row, tokens);
          Value safe = arith::SelectOp::create(b, ok, row, idx(0));
          Value col = arith::AddIOp::create(b, col2t, idx(wgmma::kMmaK * kk + 8 * half));
          Value element = arith::AddIOp::create(
              b,
              arith::MulIOp::create(
                  b, arith::AddIOp::create(b, arith::MulIOp::create(b, safe, idx(s.qHeads)), head),
                  idx(s.headDim)),
              col);
          Value pair =
              arith::SelectOp::create(b, ok, loadGlobal(v2, queries, element, 4, 8), zeros);
          pairs.push_back(flash::packBf16(b, vector::ExtractOp::create(b, pair, 0),
                                          vector::ExtractOp::create(b, pair, 1)));
        }
    return pairs;
  }

  // A consumer's schedule, per warpgroup: the scores of tile 0, then for each
  // tile j one commit group holding P_j V_j and the scores of tile j + 1
  // (issued back to back; the scores' accumulators are free while P V runs,
  // so this holds no more of them), then tile j + 1's softmax while the other
  // consumer's group runs on the tensor cores. The two consumers take turns
  // issuing their groups (two named barriers, ids 3 and 4), so that one's
  // softmax overlaps the other's products instead of both waiting on the
  // tensor cores at once.
  void consume(wgmma::Ring &ring, Value consumer, Value inGroup) {
    head =
        s.pairHeads()
            ? arith::AddIOp::create(b, arith::MulIOp::create(b, unit, idx(2)), consumer).getResult()
            : unit;
    qBase = s.pairHeads()
                ? q0
                : arith::AddIOp::create(b, q0, arith::MulIOp::create(b, consumer, idx(kRows)))
                      .getResult();
    Value warp = arith::DivUIOp::create(b, inGroup, idx(32));
    lane = arith::RemUIOp::create(b, inGroup, idx(32));
    g = arith::DivUIOp::create(b, lane, idx(4));
    t = arith::RemUIOp::create(b, lane, idx(4));
    Value rowInTile = arith::AddIOp::create(b, arith::MulIOp::create(b, warp, idx(16)), g);
    rowA = arith::AddIOp::create(b, qBase, rowInTile);
    rowB = arith::AddIOp::create(b, rowA, idx(8));
    posA = arith::AddIOp::create(b, past, rowA);
    posB = arith::AddIOp::create(b, past, rowB);
    queryPairs = loadQueries();
    firstConsumer = cmp(arith::CmpIPredicate::eq, consumer, idx(0));

    // The second consumer lets the first issue first.
    ifThen(arith::XOrIOp::create(b, firstConsumer, arith::ConstantIntOp::create(b, 1, 1)),
           [&] { arriveTurn(0); });

    const double inf = std::numeric_limits<double>::infinity();
    Value minusInf = arith::ConstantFloatOp::create(b, f32, APFloat(float(-inf)));
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value output = LLVM::ZeroOp::create(b, outputType);

    // Tile 0's scores and softmax.
    Value first = idx(0);
    ring.wait(ring.full(ring.stageOf(first)), ring.parity(first));
    beginGroup(consumer);
    Value scores = scoreProducts(ring, ring.stageOf(first));
    endGroup(/*last=*/false);
    SmallVector<Value> state =
        takeTile(scores, tileStartOf(first), ValueRange{minusInf, minusInf, zero, zero, output});

    // Tiles 1 .. tiles - 1: P V of the previous tile with their scores.
    auto loop =
        scf::ForOp::create(b, idx(0), arith::SubIOp::create(b, tiles, idx(1)), idx(1), state);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value step = loop.getInductionVar();
      Value next = arith::AddIOp::create(b, step, idx(1));
      ValueRange carried = loop.getRegionIterArgs();
      beginGroup(consumer);
      Value out = valueProducts(ring, carried[4], carried.drop_front(5), ring.stageOf(step));
      ring.wait(ring.full(ring.stageOf(next)), ring.parity(next));
      // The wait is a loop: fence again, as ptxas would (it inserts one
      // after control flow inside a group).
      NVVM::WgmmaFenceAlignedOp::create(b, b.getLoc());
      Value nextScores = scoreProducts(ring, ring.stageOf(next));
      endGroup(/*last=*/false);
      freeStage(ring, ring.stageOf(step));
      SmallVector<Value> taken =
          takeTile(nextScores, tileStartOf(next),
                   ValueRange{carried[0], carried[1], carried[2], carried[3], out});
      scf::YieldOp::create(b, taken);
    }
    // The last tile's P V.
    Value lastStage = ring.stageOf(arith::SubIOp::create(b, tiles, idx(1)));
    SmallVector<Value> results(loop.getResults());
    beginGroup(consumer);
    results[4] = valueProducts(ring, results[4], ValueRange(results).drop_front(5), lastStage);
    endGroup(/*last=*/true);
    freeStage(ring, lastStage);
    store(ValueRange(results).take_front(5));
  }

  // The consumers' turns at the tensor cores: consumer c waits at barrier 3 +
  // c for the other's arrival, issues its group, then arrives at the other's
  // barrier (the second consumer not after its last group, so that every
  // arrival is waited for).
  void arriveTurn(int64_t consumer) {
    NVVM::BarrierArriveOp::create(b, k.i32(3 + consumer), k.i32(2 * wgmma::kWarpgroup));
  }
  void beginGroup(Value consumer) {
    Value id = arith::IndexCastOp::create(b, i32, arith::AddIOp::create(b, consumer, idx(3)));
    NVVM::BarrierOp::create(b, Type(), id, k.i32(2 * wgmma::kWarpgroup), nullptr, Value());
    NVVM::WgmmaFenceAlignedOp::create(b, b.getLoc());
  }
  void endGroup(bool last) {
    NVVM::WgmmaGroupSyncAlignedOp::create(b, b.getLoc());
    auto ifFirst = scf::IfOp::create(b, firstConsumer, /*withElse=*/!last);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
      arriveTurn(1);
      if (!last) {
        b.setInsertionPointToStart(&ifFirst.getElseRegion().front());
        arriveTurn(0);
      }
    }
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 0);
  }
  void ifThen(Value condition, llvm::function_ref<void()> body) {
    auto ifOp = scf::IfOp::create(b, condition, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    body();
  }

  Value tileStartOf(Value step) {
    return arith::AddIOp::create(b, keyBegin, arith::MulIOp::create(b, step, idx(s.tileKeys())));
  }
  // The scores of the tile in `stage`: the queries (registers) against its
  // key panels, 16 dims a product, the first not accumulating.
  Value scoreProducts(wgmma::Ring &ring, Value stage) {
    Value keysAt = arith::MulIOp::create(b, stage, idx(ring.layout().aBytes()));
    Value scores = LLVM::UndefOp::create(b, scoresType);
    for (int64_t p = 0; p < s.panels(); ++p)
      for (int64_t kk = 0; kk < wgmma::kTileK / wgmma::kMmaK; ++kk) {
        const int64_t step = p * (wgmma::kTileK / wgmma::kMmaK) + kk;
        Value kAt = arith::AddIOp::create(b, keysAt, idx(p * panelBytes(s)));
        scores = wgmma::mmaRegisterA(b, scores, ArrayRef<Value>(queryPairs).slice(4 * step, 4),
                                     descriptor(kAt, kk * wgmma::kMmaK * 2, ring),
                                     {/*transposedB=*/false, /*accumulate=*/step > 0});
      }
    return scores;
  }
  // out += P V, the values of the tile in `stage`: 16 key rows a product,
  // MN-major over the panels; P from registers, four bf16 pairs a product
  // (`probabilities`, as takeTile packs them).
  Value valueProducts(wgmma::Ring &ring, Value out, ValueRange probabilities, Value stage) {
    Value valuesAt = ring.bOffset(stage);
    for (int64_t kk = 0; kk < s.tileKeys() / wgmma::kMmaK; ++kk) {
      Value vAddr = arith::AddIOp::create(b, ring.shared32(ring.at(valuesAt)),
                                          k.i32(kk * wgmma::kMmaK * wgmma::kRowBytes));
      out = wgmma::mmaRegisterA(b, out, probabilities.slice(4 * kk, 4),
                                wgmma::matrixDescriptorMnMajor(b, vAddr, panelBytes(s)),
                                {/*transposedB=*/true, /*accumulate=*/true});
    }
    return out;
  }
  // The stage's keys and values are read: each warp frees it.
  void freeStage(wgmma::Ring &ring, Value stage) { ring.release(stage, lane); }
  // A tile's scores into the online softmax: its probabilities as bf16
  // pairs in the A operand's registers for P V, the output rescaled.
  // `carried`: max A, max B, sum A, sum B, the output; the result that, then
  // the probabilities, four pairs a 16-key product: (row A, keys 2t, 2t + 1),
  // (row B, the same), then both rows at keys 8 further. The scores'
  // accumulators hold them so: no data moves between lanes.
  SmallVector<Value> takeTile(Value scores, Value tileStart, ValueRange carried) {
    auto [next, probabilities] = softmax(scores, tileStart, carried);
    SmallVector<Value> pairs;
    for (size_t i = 0; i < probabilities.size() / 2; ++i)
      pairs.push_back(flash::packBf16(b, probabilities[2 * i], probabilities[2 * i + 1]));
    Value out = carried[4];
    for (int64_t i = 0; i < s.headDim / 2; ++i) {
      Value scaled =
          arith::MulFOp::create(b, element(out, i), (i % 4) < 2 ? next.alphaA : next.alphaB);
      out = LLVM::InsertValueOp::create(b, out, scaled, ArrayRef<int64_t>{i});
    }
    SmallVector<Value> taken = {next.maxA, next.maxB, next.sumA, next.sumB, out};
    taken.append(pairs);
    return taken;
  }

  // The keys of the tile at `tileStart` that the row at position `pos`
  // sees, [first, last] (at most `pos`, below keyEnd, and on a sliding layer
  // within its window; none below position 0, where the tile's start wraps),
  // as offsets in the tile: key tileStart + c is visible iff, in 32 bits,
  // base + (c - 2t) <=u width, base = 2t - first and width = last - first,
  // one add, one compare and one select a score (an offset below first
  // wraps past any width). A row whose range is empty (last < first) gets a
  // base that no offset brings within a width of 0.
  struct MaskRow {
    Value base, width;
  };
  MaskRow maskRow(Value pos, Value tileStart, Value col2t) {
    Value last = arith::MinUIOp::create(b, pos, arith::SubIOp::create(b, keyEnd, idx(1)));
    Value first = idx(0);
    if (s.window > 0)
      first = arith::SelectOp::create(b, cmp(arith::CmpIPredicate::uge, pos, idx(s.window - 1)),
                                      arith::SubIOp::create(b, pos, idx(s.window - 1)), idx(0));
    auto offsetOf = [&](Value key) {
      return arith::IndexCastOp::create(b, i32, arith::SubIOp::create(b, key, tileStart));
    };
    Value firstOffset = offsetOf(first);
    Value width = arith::SubIOp::create(b, offsetOf(last), firstOffset);
    Value base = arith::SubIOp::create(b, arith::IndexCastOp::create(b, i32, col2t), firstOffset);
    Value none = arith::CmpIOp::create(b, arith::CmpIPredicate::slt, width, k.i32(0));
    return {arith::SelectOp::create(b, none, k.i32(1 << 30), base),
            arith::SelectOp::create(b, none, k.i32(0), width)};
  }

  // The online softmax over one tile's scores: carried (max A, max B, sum
  // A, sum B); returns its step and the tile's probabilities, in the
  // accumulators' order.
  std::pair<flash::SoftmaxStep, SmallVector<Value>> softmax(Value scores, Value tileStart,
                                                            ValueRange carried) {
    const int64_t count = kRows * s.tileKeys() / wgmma::kWarpgroup;
    const double inf = std::numeric_limits<double>::infinity();
    Value minusInf = arith::ConstantFloatOp::create(b, f32, APFloat(float(-inf)));
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    Value scaleLog2 =
        arith::ConstantFloatOp::create(b, f32, APFloat(float(s.scale / std::log(2.0))));
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    // The tile's scores, -inf where a key is not visible (masked), and each
    // row's max; softmaxStep scales them by scale * log2(e) as it
    // exponentiates them.
    auto visible = [&](bool masked) {
      SmallVector<Value> out(count);
      Value maxA = minusInf, maxB = minusInf;
      MaskRow rowMaskA, rowMaskB;
      if (masked) {
        rowMaskA = maskRow(posA, tileStart, col2t);
        rowMaskB = maskRow(posB, tileStart, col2t);
      }
      for (int64_t i = 0; i < count; ++i) {
        const int64_t j = i / 4, e = i % 4;
        Value v = element(scores, i);
        if (masked) {
          const MaskRow &row = e < 2 ? rowMaskA : rowMaskB;
          Value offset = arith::AddIOp::create(b, row.base, k.i32(8 * j + (e & 1)));
          Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ule, offset, row.width);
          v = arith::SelectOp::create(b, ok, v, minusInf);
        }
        out[i] = v;
        if (e < 2)
          maxA = arith::MaxNumFOp::create(b, maxA, v);
        else
          maxB = arith::MaxNumFOp::create(b, maxB, v);
      }
      out.push_back(maxA);
      out.push_back(maxB);
      return out;
    };
    // A tile every key of which each of the consumer's rows sees (most of a
    // causal walk) skips the mask: its last key at or before the first row's
    // position, within keyEnd (and not wrapped below 0), and, on a sliding
    // layer, its first key within the last row's window.
    Value firstRow = arith::AddIOp::create(b, past, qBase);
    Value lastRow = arith::AddIOp::create(b, firstRow, idx(kRows - 1));
    Value tileEnd = arith::AddIOp::create(b, tileStart, idx(s.tileKeys()));
    Value interior = arith::AndIOp::create(
        b,
        cmp(arith::CmpIPredicate::ule, arith::AddIOp::create(b, tileStart, idx(s.tileKeys() - 1)),
            firstRow),
        arith::AndIOp::create(b, cmp(arith::CmpIPredicate::ule, tileEnd, keyEnd),
                              cmp(arith::CmpIPredicate::ule, tileStart, keyEnd)));
    if (s.window > 0)
      interior =
          arith::AndIOp::create(b, interior,
                                cmp(arith::CmpIPredicate::ugt,
                                    arith::AddIOp::create(b, tileStart, idx(s.window)), lastRow));
    auto ifInterior = scf::IfOp::create(b, SmallVector<Type>(count + 2, f32), interior, true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifInterior.getThenRegion().front());
      scf::YieldOp::create(b, visible(false));
      b.setInsertionPointToStart(&ifInterior.getElseRegion().front());
      scf::YieldOp::create(b, visible(true));
    }
    SmallVector<Value> p(ifInterior.getResults().begin(), ifInterior.getResults().begin() + count);
    Value maxA = ifInterior.getResult(count), maxB = ifInterior.getResult(count + 1);
    flash::SoftmaxStep step =
        flash::softmaxStep(b, maxA, maxB, carried.take_front(4), p, minusInf, zero, scaleLog2);
    return {step, p};
  }

  // y rows A and B (those below T): the output over the row's sum.
  void store(ValueRange carried) {
    Value sumA = flash::quadReduce(b, carried[2], false),
          sumB = flash::quadReduce(b, carried[3], false);
    Value out = carried[4];
    Value col2t = arith::MulIOp::create(b, t, idx(2));
    auto v2 = VectorType::get({2}, f32);
    for (auto [row, sum, first] : {std::tuple{rowA, sumA, 0}, std::tuple{rowB, sumB, 2}}) {
      auto ifOk = scf::IfOp::create(b, cmp(arith::CmpIPredicate::ult, row, tokens), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOk.getThenRegion().front());
      Value inverse =
          arith::DivFOp::create(b, arith::ConstantFloatOp::create(b, f32, APFloat(1.0f)), sum);
      for (int64_t jd = 0; jd < s.headDim / 8; ++jd) {
        Value lo = arith::MulFOp::create(b, element(out, 4 * jd + first), inverse);
        Value hi = arith::MulFOp::create(b, element(out, 4 * jd + first + 1), inverse);
        Value col = arith::AddIOp::create(b, col2t, idx(8 * jd));
        Value pair = vector::FromElementsOp::create(b, v2, ValueRange{lo, hi});
        if (bf16Output)
          pair = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()), pair);
        vector::StoreOp::create(b, pair, k.arg(5), ValueRange{row, head, col}, false,
                                llvm::MaybeAlign(bf16Output ? 4 : 8));
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const S &s;
  std::string smemName;
  bool dropLastTile, bf16Output;
  MLIRContext *ctx;
  FloatType f32;
  Type i32;
  LLVM::LLVMStructType scoresType, outputType;
  Value tokens, past, unit, q0, kvHead, keyBegin, keyEnd, tiles, cacheTiles;
  unsigned scalarArg = 8;
  std::optional<kernels::CacheRows> rows;
  Value tileStart, tileSlot;     // the producer's current tile
  SmallVector<Value> queryPairs; // the scores' A operand
  Value head, qBase, lane, g, t, rowA, rowB, posA, posB;
  Value firstConsumer;
};

} // namespace

int64_t S::tileKeys() const {
  const bool wide =
      headDim == 128 && (window == 0 || window >= 128) && (!paged() || pageTokens >= 128);
  return wide ? 128 : 64;
}

int64_t S::sharedBytes() const { return ringLayout(*this).sharedBytes(); }

bool wgmmaAttentionFits(const S &shape) {
  return (shape.headDim == 64 || shape.headDim == 128) &&
         stageBlock(shape.kvHeads * shape.headDim / 4) > 0 &&
         (shape.window == 0 || shape.window >= shape.tileKeys()) && shape.kvHeads > 0 &&
         shape.qHeads % shape.kvHeads == 0;
}

namespace {

std::string shapeSuffix(const S &shape) {
  return std::to_string(shape.qHeads) + "x" + std::to_string(shape.kvHeads) + "x" +
         std::to_string(shape.headDim) +
         (shape.window ? "_w" + std::to_string(shape.window) : "_global") +
         kernels::kvSuffix(shape);
}

int64_t stagedRows(const S &shape, int64_t maxTokens) {
  const int64_t keys = shape.tileKeys();
  return (maxTokens + keys - 1) / keys * keys + keys;
}

kernels::KernelSpec attentionKernel(const S &shape, int64_t rows, bool dropLastTile,
                                    bool bf16Output) {
  const std::string name = std::string("attention_wgmma_") + (dropLastTile ? "broken_" : "") +
                           shapeSuffix(shape) + kernels::pageSuffix(shape) +
                           (bf16Output ? "_ybf16" : "");
  kernels::Tiling tiling;
  tiling.set("kind", "wgmma-attention")
      .set("queries", shape.blockQueries())
      .set("keys", shape.tileKeys())
      .set("heads", shape.pairHeads() ? 2 : 1)
      .set("stages", shape.stages())
      .set("block", kThreads)
      .set("swizzle", 128);
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
    Type keys = MemRefType::get({shape.kvHeads, rows, shape.headDim}, b.getBF16Type());
    Type values = keys;
    Type i64 = b.getI64Type();
    Type y =
        bf16Output ? MemRefType::get({dynamic, shape.qHeads, shape.headDim}, b.getBF16Type()) : q;
    std::vector<Type> types = {q, kv, kv, kvCache, kvCache, y, keys, values};
    kernels::appendPageTable(b, shape, types);
    types.insert(types.end(), {i64, i64, i64, i64});
    if (shape.cache == kernels::KvElement::BF16) // the caches' tensor maps
      types.insert(types.end(), {i64, i64});
    return types;
  };
  const std::string smemName = name + "_smem";
  kernels::KernelSpec spec =
      kernels::buildKernel(name, "kiln.attention", tiling, args, [&](kernels::KernelScope &scope) {
        wgmma::declareKernel(scope, smemName, kThreads);
        WgmmaAttentionBuilder(scope, shape, smemName, dropLastTile, bf16Output).build();
      });
  spec.sharedBytes = shape.sharedBytes();
  return spec;
}

// This call's K/V as bf16, [Hkv, R, D] each; rows T .. T + N - 1 zeros (a tile
// that starts below T reads them; their scores are masked, and zero values
// keep P V finite). A thread a (row, head, four dims), the dims fastest, so
// that a warp's loads and stores are each one contiguous run.
kernels::KernelSpec stageKernel(const S &shape, int64_t rows) {
  const std::string name = "attention_stage_bf16_" + shapeSuffix(shape);
  const int64_t quads = shape.kvHeads * shape.headDim / 4;
  const int64_t block = stageBlock(quads);
  kernels::Tiling tiling;
  tiling.set("kind", "attention-stage").set("block", block).set("vector", 4);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type kv = MemRefType::get({dynamic, shape.kvHeads, shape.headDim}, b.getF32Type());
    Type staged = MemRefType::get({shape.kvHeads, rows, shape.headDim}, b.getBF16Type());
    return {kv, kv, staged, staged, b.getI64Type()};
  };
  return kernels::buildKernel(name, "kiln.attention", tiling, args, [&](kernels::KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value id = arith::AddIOp::create(b, arith::MulIOp::create(b, bid, k.index(block)), tid);
    Value tokens = k.argIndex(4);
    Value span = arith::AddIOp::create(b, tokens, k.index(shape.tileKeys()));
    Value quad = arith::RemUIOp::create(b, id, k.index(quads));
    Value row = arith::DivUIOp::create(b, id, k.index(quads));
    auto live = scf::IfOp::create(
        b,
        arith::AndIOp::create(
            b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, span),
            arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, k.index(rows))),
        false);
    b.setInsertionPointToStart(&live.getThenRegion().front());
    Value head = arith::DivUIOp::create(b, quad, k.index(shape.headDim / 4));
    Value col = arith::MulIOp::create(
        b, arith::RemUIOp::create(b, quad, k.index(shape.headDim / 4)), k.index(4));
    auto v4 = VectorType::get({4}, b.getF32Type());
    auto bf4 = VectorType::get({4}, b.getBF16Type());
    Value inCall = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, tokens);
    Value safe = arith::SelectOp::create(b, inCall, row, k.index(0));
    Value zeros = arith::ConstantOp::create(b, v4, DenseElementsAttr::get(v4, 0.0f));
    Value key = vector::LoadOp::create(b, v4, k.arg(0), ValueRange{safe, head, col});
    Value value = vector::LoadOp::create(b, v4, k.arg(1), ValueRange{safe, head, col});
    // An FP8 cache's keys and values as it will hold them (bf16 then holds
    // them as the converted cached tiles do).
    if (shape.cache == kernels::KvElement::FP8) {
      key = kernels::roundAsCached(b, key, shape.keys());
      value = kernels::roundAsCached(b, value, shape.values());
    }
    key = arith::TruncFOp::create(b, bf4, arith::SelectOp::create(b, inCall, key, zeros));
    value = arith::TruncFOp::create(b, bf4, arith::SelectOp::create(b, inCall, value, zeros));
    vector::StoreOp::create(b, key, k.arg(2), ValueRange{head, row, col}, false,
                            llvm::MaybeAlign(8));
    vector::StoreOp::create(b, value, k.arg(3), ValueRange{head, row, col}, false,
                            llvm::MaybeAlign(8));
  });
}

} // namespace

WgmmaAttentionKernels wgmmaAttention(const S &shape, int64_t maxTokens, bool dropLastTile,
                                     bool bf16Output) {
  WgmmaAttentionKernels out;
  out.stagedRows = stagedRows(shape, maxTokens);
  const int64_t quads = shape.kvHeads * shape.headDim / 4;
  out.stage = {stageKernel(shape, out.stagedRows),
               kernels::Work{shape.tileKeys() * quads, quads, stageBlock(quads)}};
  const int64_t blocks =
      (maxTokens + shape.blockQueries() - 1) / shape.blockQueries() * shape.headUnits();
  out.attend = {attentionKernel(shape, out.stagedRows, dropLastTile, bf16Output),
                kernels::Work{blocks * kThreads, 0, kThreads}};
  // The staged keys and values [Hkv, R, D]: boxes of 64 dims x N keys of
  // one head; a bf16 cache's [slots, Hkv, D]: 64 dims of one head x N slots.
  const std::string panel = std::to_string(S::kPanel), keys = std::to_string(shape.tileKeys());
  out.attendScalars = {"tokens:0", "past:0", "tmap:6:" + panel + "," + keys + ",1:128",
                       "tmap:7:" + panel + "," + keys + ",1:128"};
  if (shape.cache == kernels::KvElement::BF16)
    for (const char *cache : {"3", "4"})
      out.attendScalars.push_back(std::string("tmap:") + cache + ":" + panel + ",1," + keys +
                                  ":128");
  out.attendScalars.insert(out.attendScalars.end(), {"part", "parts"});
  return out;
}

} // namespace kiln::nvptx
