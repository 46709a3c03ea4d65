#include "targets/nvptx/WgmmaNvfp4Experts.h"

#include "targets/common/SwiGlu.h"
#include "targets/nvptx/Nvfp4Bf16.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <cassert>

namespace kiln::nvptx::expert_tiles {

using namespace mlir;
using kernels::ExpertTileShape;

namespace {

// Only the rows live in shared memory: 32 KB a stage.
constexpr int64_t kStages = 4;
// The producer issues copies only; a consumer holds up to 128 accumulators,
// two steps of raw weights and a step's decoded fragment.
constexpr uint32_t kProducerRegs = 40, kConsumerRegs = 232;
static_assert(wgmma::registersFit(kProducerRegs, kConsumerRegs));
constexpr int64_t kCodeBytesPerStep = wgmma::kTileK / 2; // a row's codes in a k step
constexpr int64_t kScalesPerStep = wgmma::kTileK / 16;   // and its E4M3 block scales

// A thread's raw weights of one k step: for each of its two rows the eight
// bytes of codes (vector<2xi32>) and their scale (i8).
constexpr int64_t kRawValues = 4;

class Nvfp4GemmBuilder {
public:
  Nvfp4GemmBuilder(kernels::KernelScope &k, const ExpertTileShape &s, Product product,
                   int64_t kSteps, const std::string &smemName)
      : k(k), b(k.b), s(s), product(product), args{s, product}, kSteps(kSteps), smemName(smemName),
        i32(b.getI32Type()) {
    assert(kSteps >= 1 && "a tile has at least one k step");
  }

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value across = k.index(outCols(s, product) / nvfp4BlockCols(product));
    t = tileOfBlock(k, s, arith::DivUIOp::create(b, bid, across), k.arg(1), k.arg(2));
    n0 = arith::MulIOp::create(b, arith::RemUIOp::create(b, bid, across),
                               k.index(nvfp4BlockCols(product)));
    wgmma::Ring ring(k, nvfp4RingLayout(), smemName);
    ring.initBarriers(tid, /*fullArrivals=*/1, kConsumerWarps);
    wgmma::splitRoles(
        k, tid, kProducerRegs, kConsumerRegs, [&](Value inGroup) { produce(ring, inGroup); },
        [&](Value consumer, Value inGroup) { consume(ring, consumer, inGroup); });
  }

private:
  // The producer's first thread: each step's stage claimed and the tile's
  // live row blocks brought into it.
  void produce(wgmma::Ring &ring, Value inGroup) {
    produceTileRows(k, ring, t, inGroup, args.map(0), kSteps);
  }

  // The weight row behind each of the thread's two fragment rows (g and
  // g + 8 of its warp's 16): its argument and row.
  struct WeightRow {
    unsigned arg;
    Value row;
  };

  void consume(wgmma::Ring &ring, Value consumer, Value inGroup) {
    Value warp = arith::DivUIOp::create(b, inGroup, k.index(32));
    Value lane = arith::RemUIOp::create(b, inGroup, k.index(32));
    g = arith::DivUIOp::create(b, lane, k.index(4));
    quad = arith::RemUIOp::create(b, lane, k.index(4));
    // Row g's weight row: gate/up's warps take 8 intermediate columns (their
    // 16 rows gate's 8, then up's same 8), down's 16 latent columns.
    const int64_t perWarp = product == Product::GateUp ? 8 : 16;
    col = arith::AddIOp::create(
        b, n0,
        arith::AddIOp::create(
            b, arith::MulIOp::create(b, consumer, k.index(4 * perWarp)),
            arith::AddIOp::create(b, arith::MulIOp::create(b, warp, k.index(perWarp)), g)));
    rows[0] = {args.weight(0), col};
    rows[1] = product == Product::GateUp
                  ? WeightRow{args.weight(1), col}
                  : WeightRow{args.weight(0), arith::AddIOp::create(b, col, k.index(8))};
    // One loop for each count of computed 64-row blocks, the accumulators'
    // width fixed in each; the count is the block's, made warp-uniform.
    Value blocks =
        arith::DivUIOp::create(b, computedRows(k, t.rowsIn), k.index(wgmma::kConsumerRows));
    const int64_t most = kTileRows / wgmma::kConsumerRows;
    OpBuilder::InsertionGuard guard(b);
    for (int64_t n = most; n > 1; --n) {
      auto ifN = scf::IfOp::create(
          b, warpUniform(k, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, blocks, k.index(n))),
          /*withElse=*/true);
      b.setInsertionPointToStart(&ifN.getThenRegion().front());
      computeTokens(ring, n * wgmma::kConsumerRows, inGroup);
      b.setInsertionPointToStart(&ifN.getElseRegion().front());
    }
    computeTokens(ring, wgmma::kConsumerRows, inGroup);
  }

  // The raw weights of `step` for the thread's two rows.
  SmallVector<Value> loadRaw(Value step) {
    Value byte =
        arith::AddIOp::create(b, arith::MulIOp::create(b, step, k.index(kCodeBytesPerStep)),
                              arith::MulIOp::create(b, quad, k.index(8)));
    Value scaleAt =
        arith::AddIOp::create(b, arith::MulIOp::create(b, step, k.index(kScalesPerStep)), quad);
    auto codesType = VectorType::get({8}, b.getI8Type());
    SmallVector<Value> raw;
    for (const WeightRow &r : rows) {
      Value codes =
          vector::LoadOp::create(b, codesType, k.arg(r.arg), ValueRange{t.expert, r.row, byte},
                                 false, llvm::MaybeAlign(8));
      raw.push_back(vector::BitCastOp::create(b, VectorType::get({2}, i32), codes));
      raw.push_back(
          memref::LoadOp::create(b, k.arg(r.arg + 1), ValueRange{t.expert, r.row, scaleAt}));
    }
    return raw;
  }
  Value clampedStep(Value step) { return arith::MinUIOp::create(b, step, k.index(kSteps - 1)); }

  // C^T for `tokens` of the tile's rows: the first step's products overwrite
  // the accumulators, the loop carries them and two steps of raw weights.
  void computeTokens(wgmma::Ring &ring, int64_t tokens, Value inGroup) {
    auto accType = LLVM::LLVMStructType::getLiteral(b.getContext(),
                                                    SmallVector<Type>(tokens / 2, b.getF32Type()));
    SmallVector<Value> first = loadRaw(k.index(0));
    SmallVector<Value> carried;
    for (int64_t ahead = 1; ahead <= 2; ++ahead)
      llvm::append_range(carried, loadRaw(k.index(std::min<int64_t>(ahead, kSteps - 1))));
    Value acc =
        stage(ring, k.index(0), LLVM::UndefOp::create(b, accType), first, /*fresh=*/true, inGroup);
    carried.insert(carried.begin(), acc);
    auto loop = scf::ForOp::create(b, k.index(1), k.index(kSteps), k.index(1), carried);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value step = loop.getInductionVar();
      ValueRange in = loop.getRegionIterArgs();
      SmallVector<Value> further = loadRaw(clampedStep(arith::AddIOp::create(b, step, k.index(2))));
      SmallVector<Value> out = {
          stage(ring, step, in[0], in.slice(1, kRawValues), /*fresh=*/false, inGroup)};
      llvm::append_range(out, in.slice(1 + kRawValues, kRawValues));
      llvm::append_range(out, further);
      scf::YieldOp::create(b, out);
    }
    Value sums = loop.getResult(0);
    if (product == Product::GateUp)
      storeGateUp(sums, tokens);
    else
      storeDown(sums, tokens);
  }

  // One k step: the fragment decoded, the stage waited for, four products
  // of m64nNk16 (k16 q: the rows' bytes 2q and 2q + 1), committed and
  // waited for; then the stage is free.
  //
  // The products are waited for before the next step's decode: a wgmma reads
  // its A registers until a wait_group covers it, so a decode while it runs
  // would have to write other registers, and ptxas serialises the wgmma of a
  // loop whose non-wgmma instructions define their inputs while others are
  // in flight. A warpgroup's decode overlaps the other consumer's products
  // instead: the two take turns at the tensor cores.
  Value stage(wgmma::Ring &ring, Value step, Value acc, ValueRange raw, bool fresh, Value inGroup) {
    Value words[2] = {nvfp4BlockToBf16(b, raw[0], raw[1]), nvfp4BlockToBf16(b, raw[2], raw[3])};
    auto word = [&](int64_t row, int64_t i) {
      return vector::ExtractOp::create(b, words[row], ArrayRef<int64_t>{i}).getResult();
    };
    Value s = ring.stageOf(step);
    ring.wait(ring.full(s), ring.parity(step));
    Value tokens = ring.shared32(ring.aTile(s));
    NVVM::WgmmaFenceAlignedOp::create(b, b.getLoc());
    for (int64_t q = 0; q < wgmma::kTileK / wgmma::kMmaK; ++q) {
      Value a[4] = {word(0, 2 * q), word(1, 2 * q), word(0, 2 * q + 1), word(1, 2 * q + 1)};
      Value desc =
          wgmma::matrixDescriptor(b, arith::AddIOp::create(b, tokens, k.i32(q * wgmma::kMmaK * 2)));
      wgmma::RegisterAOptions options;
      options.accumulate = !(fresh && q == 0);
      acc = wgmma::mmaRegisterA(b, acc, a, desc, options);
    }
    NVVM::WgmmaGroupSyncAlignedOp::create(b, b.getLoc());
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 0);
    ring.release(s, arith::RemUIOp::create(b, inGroup, k.index(32)));
    return acc;
  }

  Value accAt(Value acc, int64_t i) {
    return LLVM::ExtractValueOp::create(b, acc, ArrayRef<int64_t>{i});
  }
  Value globalScale(int64_t matrix) {
    return decodedGlobalScale(b, k.arg(args.weight(matrix) + 2), t.expert);
  }

  // h = silu(gate) * up of the thread's column for items 8j + 2t and
  // 8j + 2t + 1 (registers 4j + e: gate, 4j + 2 + e: up). Its column and
  // its neighbour's (g ^ 1) are adjacent in fragment order: the even one
  // keeps the first item and takes the neighbour's, the odd one the second,
  // and each writes one bf16 pair.
  void storeGateUp(Value acc, int64_t tokens) {
    Value gateScale = globalScale(0), upScale = globalScale(1);
    Value one = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f));
    Value even = arith::CmpIOp::create(b, arith::CmpIPredicate::eq,
                                       arith::RemUIOp::create(b, g, k.index(2)), k.index(0));
    Value pairCol = arith::AddIOp::create(
        b, n0,
        fragmentOrderPosition(
            k, arith::AndIOp::create(b, arith::SubIOp::create(b, col, n0), k.index(~int64_t(1)))));
    Value firstRow = arith::AddIOp::create(
        b, arith::MulIOp::create(b, t.tile, k.index(kTileRows)),
        arith::AddIOp::create(b, arith::MulIOp::create(b, quad, k.index(2)),
                              arith::SelectOp::create(b, even, k.index(0), k.index(1))));
    auto f32x2 = VectorType::get({2}, b.getF32Type());
    for (int64_t j = 0; j < tokens / 8; ++j) {
      Value h[2];
      for (int64_t e = 0; e < 2; ++e) {
        Value gate = arith::MulFOp::create(b, accAt(acc, 4 * j + e), gateScale);
        Value up = arith::MulFOp::create(b, accAt(acc, 4 * j + 2 + e), upScale);
        h[e] = kernels::swiGlu(b, gate, up, one);
      }
      Value send = arith::SelectOp::create(b, even, h[1], h[0]);
      Value got = gpu::ShuffleOp::create(b, send, 4, 32, gpu::ShuffleMode::XOR).getShuffleResult();
      Value lo = arith::SelectOp::create(b, even, h[0], got);
      Value hi = arith::SelectOp::create(b, even, got, h[1]);
      Value pair = arith::TruncFOp::create(b, VectorType::get({2}, b.getBF16Type()),
                                           vector::FromElementsOp::create(b, f32x2, {lo, hi}));
      Value row = arith::AddIOp::create(b, firstRow, k.index(8 * j));
      vector::StoreOp::create(b, pair, k.arg(args.out()), ValueRange{row, pairCol}, false,
                              llvm::MaybeAlign(4));
    }
  }

  // y[t, j, :] of each item (t * k + j) among the tokens: the thread's two
  // latent columns (rows g and g + 8), registers 4j + e and 4j + 2 + e.
  void storeDown(Value acc, int64_t tokens) {
    Value scale = globalScale(0);
    Value cols[2] = {col, arith::AddIOp::create(b, col, k.index(8))};
    for (int64_t j = 0; j < tokens / 8; ++j)
      for (int64_t e = 0; e < 2; ++e) {
        Value row = arith::AddIOp::create(b, arith::MulIOp::create(b, quad, k.index(2)),
                                          k.index(8 * j + e));
        OpBuilder::InsertionGuard guard(b);
        ItemPlace place = itemOfRow(k, s, t, row);
        for (int64_t half = 0; half < 2; ++half) {
          Value v = arith::MulFOp::create(b, accAt(acc, 4 * j + 2 * half + e), scale);
          memref::StoreOp::create(b, v, k.arg(args.out()),
                                  ValueRange{place.token, place.choice, cols[half]});
        }
      }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const ExpertTileShape &s;
  Product product;
  GemmArgs args;
  int64_t kSteps;
  std::string smemName;
  Type i32;
  TileOfBlock t;
  Value n0;
  // The consumer thread's fragment row g, lane in its quad, column (gate/up:
  // the intermediate column; down: row g's latent column) and weight rows.
  Value g, quad, col;
  WeightRow rows[2];
};

} // namespace

int64_t nvfp4BlockCols(Product p) { return p == Product::GateUp ? 64 : 128; }

bool nvfp4ExpertsFit(const ExpertTileShape &s) {
  for (Product p : {Product::GateUp, Product::Down})
    if (inDim(s, p) % wgmma::kTileK != 0 || outCols(s, p) % nvfp4BlockCols(p) != 0)
      return false;
  return true;
}

wgmma::RingLayout nvfp4RingLayout() { return wgmma::RingLayout{kStages, kTileRows, 0}; }

void buildNvfp4ExpertGemm(kernels::KernelScope &k, const ExpertTileShape &s, Product p,
                          int64_t kSteps, const std::string &smemName) {
  Nvfp4GemmBuilder(k, s, p, kSteps, smemName).build();
}

Value fragmentOrderPosition(kernels::KernelScope &k, Value m) {
  // m = 16t + 4q + 2h + e goes to 16q + 8h + 2t + e.
  ImplicitLocOpBuilder &b = k.b;
  auto field = [&](int64_t shift, int64_t mask) {
    return arith::AndIOp::create(b, arith::ShRUIOp::create(b, m, k.index(shift)), k.index(mask));
  };
  Value q = field(2, 3), h = field(1, 1), t = field(4, 3), e = field(0, 1);
  Value pos = arith::AddIOp::create(b, arith::MulIOp::create(b, q, k.index(16)),
                                    arith::MulIOp::create(b, h, k.index(8)));
  pos = arith::AddIOp::create(b, pos, arith::MulIOp::create(b, t, k.index(2)));
  return arith::AddIOp::create(b, pos, e);
}

} // namespace kiln::nvptx::expert_tiles
