#include "targets/nvptx/WgmmaExperts.h"

#include "targets/common/KernelBuilder.h"
#include "targets/nvptx/Nvfp4Bf16.h"
#include "targets/nvptx/WgmmaPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx {

using namespace mlir;
using kernels::ExpertTileShape;

namespace {

// 256 items a tile, four blocks of 64 rows: consumer c computes blocks c
// and c + 2, each where it holds an item. An expert's items mostly fit one
// tile, so its weights are read (and NVFP4 decoded) once for all of them,
// and a tile computes its items rounded up to 64, not to 128.
constexpr int64_t kTileRows = 256;
constexpr int64_t kThreads = 3 * wgmma::kWarpgroup; // producer + two consumers
constexpr int64_t kStages = 4;
constexpr int64_t kConsumerWarps = 8;
constexpr int64_t kRowsThreads = 128; // the rows kernel's block
// k steps the decoding producer takes an iteration. It claims all of them
// before arriving on the first, and claiming step s waits for the consumers
// to have freed step s - kStages, which they do once they hold step
// s - kStages + 1: so fewer than kStages, or producer and consumers wait on
// each other (four steps with four stages hung on the H200). Three spill.
constexpr int64_t kDecodeSteps = 2;
static_assert(kDecodeSteps < kStages, "the producer would wait for a stage it has not filled");
// Registers a thread after setmaxnreg: a TMA producer needs few; one that
// decodes NVFP4 keeps an iteration's raw weights in flight while it decodes
// the last one's.
constexpr uint32_t kTmaProducerRegs = 40, kTmaConsumerRegs = 232;
constexpr uint32_t kDecodeProducerRegs = 88, kDecodeConsumerRegs = 208;
static_assert(wgmma::registersFit(kTmaProducerRegs, kTmaConsumerRegs) &&
              wgmma::registersFit(kDecodeProducerRegs, kDecodeConsumerRegs));

enum class Product { GateUp, Down };

// The shape with this file's tiles.
ExpertTileShape wideTiles(ExpertTileShape s) {
  s.tileRows = kTileRows;
  return s;
}

// The columns of one weight matrix a block takes: gate and up share the B
// tile (up to 128 rows), down fills it.
int64_t matrixCols(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? std::min<int64_t>(64, s.intermediate)
                              : std::min<int64_t>(128, s.latent);
}
int64_t bRows(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? 2 * matrixCols(s, p) : matrixCols(s, p);
}
int64_t outCols(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.intermediate : s.latent;
}
int64_t inDim(const ExpertTileShape &s, Product p) {
  return p == Product::GateUp ? s.latent : s.intermediate;
}
int64_t colTiles(const ExpertTileShape &s, Product p) { return outCols(s, p) / matrixCols(s, p); }

// The tile a block works on, from the lists: its index, expert, first item
// position and how many of its rows hold items.
struct TileOfBlock {
  Value tile, expert, base, rowsIn;
};

// Reads the tile count (meta[E + 1]) and leaves the builder inside an
// scf.if on the tile's existence, where it reads the tile's expert and items.
// The rows of a tile's 64-row blocks that hold items: `rowsIn` rounded up
// to 64. The GEMMs compute and copy those rows only.
Value computedRows(kernels::KernelScope &k, Value rowsIn) {
  ImplicitLocOpBuilder &b = k.b;
  Value blocks =
      arith::DivUIOp::create(b, arith::AddIOp::create(b, rowsIn, k.index(wgmma::kConsumerRows - 1)),
                             k.index(wgmma::kConsumerRows));
  return arith::MulIOp::create(b, blocks, k.index(wgmma::kConsumerRows));
}

TileOfBlock tileOfBlock(kernels::KernelScope &k, const ExpertTileShape &s, Value tile, Value meta,
                        Value tiles) {
  ImplicitLocOpBuilder &b = k.b;
  auto load = [&](Value ref, Value at) {
    Value v = memref::LoadOp::create(b, ref, ValueRange{at});
    return arith::IndexCastOp::create(b, b.getIndexType(), v).getResult();
  };
  Value count = load(meta, k.index(s.experts + 1));
  auto ifLive = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tile, count), /*withElse=*/false);
  b.setInsertionPointToStart(&ifLive.getThenRegion().front());
  TileOfBlock t;
  t.tile = tile;
  Value at = arith::MulIOp::create(b, tile, k.index(2));
  t.expert = load(tiles, at);
  Value r0 = load(tiles, arith::AddIOp::create(b, at, k.index(1)));
  Value first = load(meta, t.expert);
  Value end = load(meta, arith::AddIOp::create(b, t.expert, k.index(1)));
  t.base = arith::AddIOp::create(b, first, r0);
  t.rowsIn = arith::MinUIOp::create(b, arith::SubIOp::create(b, end, t.base), k.index(kTileRows));
  return t;
}

class ExpertGemmBuilder {
public:
  ExpertGemmBuilder(kernels::KernelScope &k, const ExpertTileShape &s, Product product,
                    int64_t kDim, const std::string &smemName)
      : k(k), b(k.b), s(s), product(product), cols(matrixCols(s, product)),
        kSteps(kDim / wgmma::kTileK), smemName(smemName), i32(b.getI32Type()) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value tilesAcross = k.index(colTiles(s, product));
    t = tileOfBlock(k, s, arith::DivUIOp::create(b, bid, tilesAcross), k.arg(1), k.arg(2));
    n0 = arith::MulIOp::create(b, arith::RemUIOp::create(b, bid, tilesAcross), k.index(cols));
    wgmma::Ring ring(k, layout(), smemName);
    // Full: the issuer's expect_tx, plus each decoding thread's arrival.
    ring.initBarriers(tid, s.nvfp4 ? 1 + wgmma::kWarpgroup : 1, kConsumerWarps);

    wgmma::splitRoles(
        k, tid, s.nvfp4 ? kDecodeProducerRegs : kTmaProducerRegs,
        s.nvfp4 ? kDecodeConsumerRegs : kTmaConsumerRegs,
        [&](Value inGroup) {
          if (s.nvfp4)
            produceDecoding(ring, inGroup);
          else
            produceCopying(ring, inGroup);
        },
        [&](Value consumer, Value inGroup) { consume(ring, consumer, inGroup); });
  }

  wgmma::RingLayout layout() const {
    return wgmma::RingLayout{kStages, kTileRows, bRows(s, product)};
  }

private:
  // Whether 64-row block `block` of the tile holds an item, as lane 0 of
  // the warp sees it: every lane does, but ptxas, told so by the shuffle,
  // then knows the branches on it are not divergent, where wgmma must not be.
  Value blockLive(Value block) {
    Value first = arith::MulIOp::create(b, block, k.index(wgmma::kConsumerRows));
    Value live = arith::ExtUIOp::create(
        b, i32, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, first, t.rowsIn));
    Value lane0 = gpu::ShuffleOp::create(b, live, 0, 32, gpu::ShuffleMode::IDX).getShuffleResult();
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ne, lane0, k.i32(0));
  }

  // Consumer c's row blocks c and c + 2: the ring's loop over those that
  // hold items (block c + 2 only where c does), then their epilogues, each
  // case in a branch of its own so that no accumulator crosses a branch
  // (ptxas would serialise the wgmma). Blocks past the items cost no wgmma.
  void consume(wgmma::Ring &ring, Value consumer, Value inGroup) {
    Value blocks[2] = {consumer, arith::AddIOp::create(b, consumer, k.index(2))};
    Value live[2] = {blockLive(blocks[0]), blockLive(blocks[1])};
    auto computeBlocks = [&](ValueRange liveBlocks) {
      SmallVector<Value> accs = ring.accumulateRowBlocks(liveBlocks, kSteps, inGroup);
      for (size_t i = 0; i < accs.size(); ++i) {
        if (product == Product::GateUp)
          storeGateUp(accs[i], liveBlocks[i], inGroup);
        else
          storeDown(accs[i], liveBlocks[i], inGroup);
      }
    };
    auto ifBoth = scf::IfOp::create(b, live[1], /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifBoth.getThenRegion().front());
    computeBlocks(ValueRange{blocks[0], blocks[1]});
    b.setInsertionPointToStart(&ifBoth.getElseRegion().front());
    auto ifFirst = scf::IfOp::create(b, live[0], /*withElse=*/true);
    b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
    computeBlocks(ValueRange{blocks[0]});
    b.setInsertionPointToStart(&ifFirst.getElseRegion().front());
    computeBlocks(ValueRange{});
  }

  // Argument positions: rows, meta, tiles, items, the projections, the
  // output, then the scalars (tensor maps).
  unsigned weightArg(int64_t matrix) const {
    return 4 + unsigned(matrix * kernels::projectionArgCount(s));
  }
  int64_t matrices() const { return product == Product::GateUp ? 2 : 1; }
  unsigned outArg() const { return weightArg(matrices()); }
  unsigned mapArg(int64_t which) const { return outArg() + 1 + unsigned(which); }
  Value toI32(Value index) { return arith::IndexCastOp::create(b, i32, index); }
  Value rowsMap() {
    return LLVM::IntToPtrOp::create(b, LLVM::LLVMPointerType::get(b.getContext()),
                                    k.arg(mapArg(0)));
  }

  // The bytes of A a stage holds: its live 64-row blocks'.
  Value liveRowBytes() {
    return arith::IndexCastOp::create(
        b, i32, arith::MulIOp::create(b, computedRows(k, t.rowsIn), k.index(wgmma::kRowBytes)));
  }

  // The issuer's TMA copies of the tile's rows for `step` into stage s: a
  // box of 64 rows for each block that holds items (the others are never
  // read).
  void copyRows(wgmma::Ring &ring, Value map, Value stage, Value kk, Value fullAt) {
    Value first = arith::MulIOp::create(b, t.tile, k.index(kTileRows));
    Value aTile = ring.aTile(stage);
    for (int64_t block = 0; block < kTileRows / wgmma::kConsumerRows; ++block) {
      Value row0 = k.index(block * wgmma::kConsumerRows);
      auto ifLive = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row0, t.rowsIn), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifLive.getThenRegion().front());
      Value dst = LLVM::GEPOp::create(
          b, aTile.getType(), b.getI8Type(), aTile,
          ArrayRef<LLVM::GEPArg>{int32_t(block * wgmma::kConsumerRows * wgmma::kRowBytes)});
      ring.copy(dst, map, kk, {arith::AddIOp::create(b, first, row0)}, fullAt);
    }
  }

  // bf16 weights: one thread has the TMA bring the rows and the weights.
  void produceCopying(wgmma::Ring &ring, Value inGroup) {
    auto issuer = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, inGroup, k.index(0)), false);
    b.setInsertionPointToStart(&issuer.getThenRegion().front());
    Type ptr = LLVM::LLVMPointerType::get(b.getContext());
    Value rows = rowsMap();
    SmallVector<Value> weights;
    for (int64_t m = 0; m < matrices(); ++m)
      weights.push_back(LLVM::IntToPtrOp::create(b, ptr, k.arg(mapArg(1 + m))));
    ring.acquireTensorMap(rows);
    for (Value map : weights)
      ring.acquireTensorMap(map);
    auto loop = scf::ForOp::create(b, k.index(0), k.index(kSteps), k.index(1));
    b.setInsertionPointToStart(loop.getBody());
    Value step = loop.getInductionVar();
    auto [stage, fullAt] = ring.claim(step);
    ring.expectBytes(
        fullAt, arith::AddIOp::create(b, liveRowBytes(), k.i32(int32_t(ring.layout().bBytes()))));
    Value kk = toI32(arith::MulIOp::create(b, step, k.index(wgmma::kTileK)));
    copyRows(ring, rows, stage, kk, fullAt);
    for (int64_t m = 0; m < matrices(); ++m) {
      Value tileAt = ring.bOffset(stage);
      Value dst = ring.at(arith::AddIOp::create(b, tileAt, k.index(m * cols * wgmma::kRowBytes)));
      ring.copy(dst, weights[m], kk, {n0, t.expert}, fullAt);
    }
  }

  // A step's raw NVFP4 weights for this thread: its units are (row 32 i +
  // inGroup / 4, k block inGroup % 4) of the B tile, i < bRows / 32; each
  // 8 bytes of codes (as two i32) and one E4M3 scale.
  SmallVector<Value> loadRaw(Value step, Value inGroup) {
    Value kk = arith::MulIOp::create(b, step, k.index(wgmma::kTileK));
    Value blk = arith::RemUIOp::create(b, inGroup, k.index(4));
    Value byte = arith::AddIOp::create(b, arith::DivUIOp::create(b, kk, k.index(2)),
                                       arith::MulIOp::create(b, blk, k.index(8)));
    Value scaleAt = arith::AddIOp::create(b, arith::DivUIOp::create(b, kk, k.index(16)), blk);
    Value sub = arith::DivUIOp::create(b, inGroup, k.index(4));
    SmallVector<Value> raw;
    auto codesType = VectorType::get({8}, b.getI8Type());
    auto wordsType = VectorType::get({2}, i32);
    for (int64_t i = 0; i < bRows(s, product) / 32; ++i) {
      int64_t matrix = (32 * i) / cols, first = 32 * i - matrix * cols;
      Value row = arith::AddIOp::create(b, n0, arith::AddIOp::create(b, sub, k.index(first)));
      unsigned arg = weightArg(matrix);
      Value codes = vector::LoadOp::create(
          b, codesType, k.arg(arg), ValueRange{t.expert, row, byte}, false, llvm::MaybeAlign(8));
      raw.push_back(vector::BitCastOp::create(b, wordsType, codes));
      raw.push_back(memref::LoadOp::create(b, k.arg(arg + 1), ValueRange{t.expert, row, scaleAt}));
    }
    return raw;
  }

  // NVFP4 weights: the producer's 128 threads decode kDecodeSteps k steps an
  // iteration (their loads issued an iteration ahead), each step's B tile
  // stored in the TMA's swizzled layout (16-byte chunk c of row r at chunk
  // c ^ (r % 8)); then they make the stores visible to the tensor cores (the
  // async proxy) and arrive. Its first thread has the TMA bring the rows.
  // Several steps an iteration give a thread independent decodes to
  // interleave: one step of a 128-row B tile is only four a thread.
  void produceDecoding(wgmma::Ring &ring, Value inGroup) {
    Value issuer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, inGroup, k.index(0));
    Value rows = rowsMap();
    {
      auto ifIssuer = scf::IfOp::create(b, issuer, false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
      ring.acquireTensorMap(rows);
    }
    // The raw weights of steps first .. first + count - 1 (the last step
    // where they run past it).
    auto loadSteps = [&](Value first, int64_t count) {
      SmallVector<Value> raw;
      for (int64_t j = 0; j < count; ++j) {
        Value step = arith::MinUIOp::create(b, arith::AddIOp::create(b, first, k.index(j)),
                                            k.index(kSteps - 1));
        llvm::append_range(raw, loadRaw(step, inGroup));
      }
      return raw;
    };
    const int64_t groups = kSteps / kDecodeSteps, tail = kSteps % kDecodeSteps;
    SmallVector<Value> inFlight = loadSteps(k.index(0), kDecodeSteps);
    auto loop = scf::ForOp::create(b, k.index(0), k.index(groups * kDecodeSteps),
                                   k.index(kDecodeSteps), inFlight);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value first = loop.getInductionVar();
      SmallVector<Value> ahead =
          loadSteps(arith::AddIOp::create(b, first, k.index(kDecodeSteps)), kDecodeSteps);
      produceSteps(ring, inGroup, issuer, rows, first, kDecodeSteps, loop.getRegionIterArgs());
      scf::YieldOp::create(b, ahead);
    }
    if (tail)
      produceSteps(ring, inGroup, issuer, rows, k.index(groups * kDecodeSteps), tail,
                   loop.getResults());
  }

  // Steps first .. first + count - 1 from their raw weights (`raw`, a step's
  // after another's): each step's stage claimed, its rows brought by the
  // TMA and its B tile decoded; then one fence and each stage's arrival.
  void produceSteps(wgmma::Ring &ring, Value inGroup, Value issuer, Value rows, Value first,
                    int64_t count, ValueRange raw) {
    const int64_t units = bRows(s, product) / 32, perStep = 2 * units;
    Value sub = arith::DivUIOp::create(b, inGroup, k.index(4));
    Value blk = arith::RemUIOp::create(b, inGroup, k.index(4));
    Value swizzle = arith::RemUIOp::create(b, sub, k.index(8)); // row % 8 for every unit
    SmallVector<Value> fulls;
    for (int64_t j = 0; j < count; ++j) {
      Value step = arith::AddIOp::create(b, first, k.index(j));
      auto [stage, fullAt] = ring.claim(step);
      fulls.push_back(fullAt);
      {
        auto ifIssuer = scf::IfOp::create(b, issuer, false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
        ring.expectBytes(fullAt, liveRowBytes());
        copyRows(ring, rows, stage, toI32(arith::MulIOp::create(b, step, k.index(wgmma::kTileK))),
                 fullAt);
      }
      Value tileAt = ring.bOffset(stage);
      for (int64_t i = 0; i < units; ++i) {
        Value words = nvfp4BlockToBf16(b, raw[j * perStep + 2 * i], raw[j * perStep + 2 * i + 1]);
        Value row = arith::AddIOp::create(b, sub, k.index(32 * i));
        Value rowAt = arith::AddIOp::create(
            b, tileAt, arith::MulIOp::create(b, row, k.index(wgmma::kRowBytes)));
        for (int64_t half = 0; half < 2; ++half) {
          Value chunk = arith::XOrIOp::create(
              b, arith::AddIOp::create(b, arith::MulIOp::create(b, blk, k.index(2)), k.index(half)),
              swizzle);
          Value at = ring.at(
              arith::AddIOp::create(b, rowAt, arith::MulIOp::create(b, chunk, k.index(16))));
          Value part = vector::ShuffleOp::create(
              b, words, words,
              ArrayRef<int64_t>{4 * half, 4 * half + 1, 4 * half + 2, 4 * half + 3});
          LLVM::StoreOp::create(b, part, at, /*alignment=*/16);
        }
      }
    }
    NVVM::FenceProxyOp::create(
        b, b.getLoc(), NVVM::ProxyKind::async_shared,
        NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
    for (Value fullAt : fulls)
      NVVM::MBarrierArriveOp::create(b, b.getLoc(), Type(), fullAt, Value(),
                                     NVVM::MemScopeKind::CTA, false);
  }

  // The accumulators of m64nNk16 for row block `block`: thread t of the
  // warpgroup holds, for each 8 columns j, rows 64 block + 16 (t / 32) +
  // (t % 32) / 4 and 8 below, columns 8j + 2 (t % 4) and the next:
  // registers 4j .. 4j + 3.
  struct Fragment {
    Value row, col;
  };
  Fragment fragment(Value block, Value inGroup) {
    Value warp = arith::DivUIOp::create(b, inGroup, k.index(32));
    Value lane = arith::RemUIOp::create(b, inGroup, k.index(32));
    Value row =
        arith::AddIOp::create(b, arith::MulIOp::create(b, block, k.index(wgmma::kConsumerRows)),
                              arith::AddIOp::create(b, arith::MulIOp::create(b, warp, k.index(16)),
                                                    arith::DivUIOp::create(b, lane, k.index(4))));
    Value col = arith::AddIOp::create(
        b, n0, arith::MulIOp::create(b, arith::RemUIOp::create(b, lane, k.index(4)), k.index(2)));
    return {row, col};
  }
  // The NVFP4 global scale of weight matrix `m` for the tile's expert, with
  // what the decoded weights fall short by.
  Value globalScale(int64_t m) { return decodedGlobalScale(b, k.arg(weightArg(m) + 2), t.expert); }

  // h = silu(gate) * up (gate in columns 0 .. cols - 1 of the accumulators,
  // up in cols ..), bf16, at the tile's rows of h.
  void storeGateUp(Value acc, Value block, Value inGroup) {
    Fragment f = fragment(block, inGroup);
    Value gateScale = s.nvfp4 ? globalScale(0) : Value();
    Value upScale = s.nvfp4 ? globalScale(1) : Value();
    Value one = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f));
    Value tileRow =
        arith::AddIOp::create(b, arith::MulIOp::create(b, t.tile, k.index(kTileRows)), f.row);
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, tileRow, k.index(8 * half));
      for (int64_t j = 0; j < cols / 8; ++j) {
        SmallVector<Value> pair;
        for (int64_t e = 0; e < 2; ++e) {
          Value g = LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{4 * j + 2 * half + e});
          Value u = LLVM::ExtractValueOp::create(
              b, acc, ArrayRef<int64_t>{4 * (j + cols / 8) + 2 * half + e});
          if (s.nvfp4) {
            g = arith::MulFOp::create(b, g, gateScale);
            u = arith::MulFOp::create(b, u, upScale);
          }
          // silu(g) * u, as the reference computes it.
          Value den =
              arith::AddFOp::create(b, one, math::ExpOp::create(b, arith::NegFOp::create(b, g)));
          pair.push_back(arith::MulFOp::create(b, arith::DivFOp::create(b, g, den), u));
        }
        Value h = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()),
                                          vector::FromElementsOp::create(b, f32x2, pair));
        Value col = arith::AddIOp::create(b, f.col, k.index(8 * j));
        vector::StoreOp::create(b, h, k.arg(outArg()), ValueRange{row, col}, false,
                                llvm::MaybeAlign(4));
      }
    }
  }

  // y[t, j, :] of each row that holds an item (t * k + j), scaled.
  void storeDown(Value acc, Value block, Value inGroup) {
    Fragment f = fragment(block, inGroup);
    Value scale = s.nvfp4 ? globalScale(0) : Value();
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, f.row, k.index(8 * half));
      auto ifItem = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, t.rowsIn), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getThenRegion().front());
      Value item = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, k.arg(3), ValueRange{arith::AddIOp::create(b, t.base, row)}));
      Value token = arith::DivUIOp::create(b, item, k.index(s.k));
      Value choice = arith::RemUIOp::create(b, item, k.index(s.k));
      for (int64_t j = 0; j < cols / 8; ++j) {
        SmallVector<Value> pair;
        for (int64_t e = 0; e < 2; ++e) {
          Value v = LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{4 * j + 2 * half + e});
          pair.push_back(s.nvfp4 ? arith::MulFOp::create(b, v, scale).getResult() : v);
        }
        Value col = arith::AddIOp::create(b, f.col, k.index(8 * j));
        vector::StoreOp::create(b, vector::FromElementsOp::create(b, f32x2, pair), k.arg(outArg()),
                                ValueRange{token, choice, col}, false, llvm::MaybeAlign(8));
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const ExpertTileShape &s;
  Product product;
  int64_t cols, kSteps;
  std::string smemName;
  Type i32;
  TileOfBlock t;
  Value n0;
};

kernels::Tiling gemmTiling(const ExpertTileShape &s, Product p) {
  kernels::Tiling tiling;
  tiling.set("kind", p == Product::GateUp ? "wgmma-expert-gateup" : "wgmma-expert-down")
      .set("tile_m", kTileRows)
      .set("tile_n", bRows(s, p))
      .set("tile_k", wgmma::kTileK)
      .set("stages", kStages)
      .set("block", kThreads)
      .set("swizzle", 128)
      .set("weights", s.nvfp4 ? "nvfp4-decoded" : "bf16-tma");
  return tiling;
}

kernels::KernelSpec expertGemm(const ExpertTileShape &s, Product p, bool dropLastStep) {
  const std::string name =
      std::string(p == Product::GateUp ? "expert_gateup_wgmma_" : "expert_down_wgmma_") +
      (dropLastStep ? "broken_" : "") + kernels::expertShapeSuffix(s);
  const std::string smemName = name + "_smem";
  const int64_t in = inDim(s, p), out = outCols(s, p);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type i64 = b.getI64Type();
    std::vector<Type> types = {MemRefType::get({dynamic, in}, b.getBF16Type())};
    kernels::appendExpertListTypes(b, s, types);
    for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
      kernels::appendProjectionTypes(b, s, out, in, types);
    types.push_back(p == Product::GateUp
                        ? Type(MemRefType::get({dynamic, out}, b.getBF16Type()))
                        : Type(MemRefType::get({dynamic, s.k, out}, b.getF32Type())));
    types.push_back(i64); // the rows' tensor map
    if (!s.nvfp4)
      for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
        types.push_back(i64); // the weights' tensor maps
    return types;
  };
  wgmma::RingLayout ring{};
  kernels::KernelSpec spec = kernels::buildKernel(
      name, "kiln.megamoe", gemmTiling(s, p), args, [&](kernels::KernelScope &scope) {
        wgmma::declareKernel(scope, smemName, kThreads);
        ExpertGemmBuilder builder(scope, s, p, dropLastStep ? in - wgmma::kTileK : in, smemName);
        ring = builder.layout();
        builder.build();
      });
  spec.sharedBytes = ring.sharedBytes();
  return spec;
}

std::vector<std::string> gemmScalars(const ExpertTileShape &s, Product p) {
  const std::string k = std::to_string(wgmma::kTileK);
  std::vector<std::string> scalars = {"tmap:0:" + k + "," + std::to_string(wgmma::kConsumerRows) +
                                      ":128"};
  if (!s.nvfp4)
    for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
      scalars.push_back("tmap:" + std::to_string(4 + m) + ":" + k + "," +
                        std::to_string(matrixCols(s, p)) + ",1:128");
  scalars.push_back("part");
  scalars.push_back("parts");
  return scalars;
}

// The rows kernel: a block of 128 threads a (tile, row); 8 elements a
// thread a pass. Rows past the items are zeros up to the next 64 (the row
// blocks the GEMMs compute); the rest are never read.
kernels::KernelSpec expertRows(const ExpertTileShape &s) {
  const std::string name = "expert_rows_bf16_" + kernels::expertShapeSuffix(s);
  kernels::Tiling tiling;
  tiling.set("kind", "expert-rows").set("block", kRowsThreads).set("vector", 8);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    std::vector<Type> types = {MemRefType::get({dynamic, s.latent}, b.getF32Type())};
    kernels::appendExpertListTypes(b, s, types);
    types.push_back(MemRefType::get({dynamic, s.latent}, b.getBF16Type()));
    return types;
  };
  return kernels::buildKernel(name, "kiln.megamoe", tiling, args, [&](kernels::KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value r = arith::RemUIOp::create(b, bid, k.index(kTileRows));
    TileOfBlock t =
        tileOfBlock(k, s, arith::DivUIOp::create(b, bid, k.index(kTileRows)), k.arg(1), k.arg(2));
    Value row = arith::AddIOp::create(b, arith::MulIOp::create(b, t.tile, k.index(kTileRows)), r);
    Value begin = arith::MulIOp::create(b, tid, k.index(8));
    auto f32x8 = VectorType::get({8}, b.getF32Type());
    auto bf16x8 = VectorType::get({8}, b.getBF16Type());
    Value blockEnd = computedRows(k, t.rowsIn);
    auto ifItem = scf::IfOp::create(
        b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, t.rowsIn), /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getThenRegion().front());
      Value item = arith::IndexCastOp::create(
          b, b.getIndexType(),
          memref::LoadOp::create(b, k.arg(3), ValueRange{arith::AddIOp::create(b, t.base, r)}));
      Value token = arith::DivUIOp::create(b, item, k.index(s.k));
      auto loop = scf::ForOp::create(b, begin, k.index(s.latent), k.index(8 * kRowsThreads));
      b.setInsertionPointToStart(loop.getBody());
      Value c = loop.getInductionVar();
      Value z = vector::LoadOp::create(b, f32x8, k.arg(0), ValueRange{token, c}, false,
                                       llvm::MaybeAlign(16));
      vector::StoreOp::create(b, arith::TruncFOp::create(b, bf16x8, z), k.arg(4),
                              ValueRange{row, c}, false, llvm::MaybeAlign(16));
    }
    {
      // Rows past the tile's items in a computed row block: zeros, so that
      // every product is finite.
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifItem.getElseRegion().front());
      auto ifComputed = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, blockEnd), /*withElse=*/false);
      b.setInsertionPointToStart(&ifComputed.getThenRegion().front());
      Value zero = arith::ConstantOp::create(
          b, DenseElementsAttr::get(bf16x8, FloatAttr::get(b.getBF16Type(), 0.0)));
      auto loop = scf::ForOp::create(b, begin, k.index(s.latent), k.index(8 * kRowsThreads));
      b.setInsertionPointToStart(loop.getBody());
      vector::StoreOp::create(b, zero, k.arg(4), ValueRange{row, loop.getInductionVar()}, false,
                              llvm::MaybeAlign(16));
    }
  });
}

} // namespace

bool wgmmaExpertsFit(const ExpertTileShape &s) {
  for (Product p : {Product::GateUp, Product::Down}) {
    int64_t cols = matrixCols(s, p);
    if (cols % 32 != 0 || outCols(s, p) % cols != 0 || inDim(s, p) % wgmma::kTileK != 0)
      return false;
  }
  return s.latent % 8 == 0 && kernels::expertListsFit(s);
}

kernels::TargetHooks::MatrixExperts wgmmaExperts(const ExpertTileShape &shape, bool dropLastStep) {
  const ExpertTileShape s = wideTiles(shape);
  kernels::TargetHooks::MatrixExperts experts;
  experts.lists = kernels::expertLists(s);
  experts.listsWork = kernels::expertListsWork(s);
  experts.gateUp = expertGemm(s, Product::GateUp, dropLastStep);
  experts.down = expertGemm(s, Product::Down, false);
  experts.gateUpWork =
      kernels::Work{s.maxTiles() * colTiles(s, Product::GateUp) * kThreads, 0, kThreads};
  experts.downWork =
      kernels::Work{s.maxTiles() * colTiles(s, Product::Down) * kThreads, 0, kThreads};
  experts.metaWords = s.experts + 2;
  experts.tileWords = 2 * s.maxTiles();
  experts.itemWords = s.maxItems();
  experts.rows = kernels::KernelLaunch{
      expertRows(s), kernels::Work{s.maxTiles() * kTileRows * kRowsThreads, 0, kRowsThreads}};
  // maxTiles() tiles of 256 rows: at most 256 (E + 1) + k T.
  experts.tileRows = kTileRows * (s.experts + 1);
  experts.gateUpScalars = gemmScalars(s, Product::GateUp);
  experts.downScalars = gemmScalars(s, Product::Down);
  return experts;
}

} // namespace kiln::nvptx
