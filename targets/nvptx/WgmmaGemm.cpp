// Built as typed IR (targets/common/KernelBuilder.h) at the NVVM level: the
// shared-memory addresses, mbarriers, TMA copies and wgmma descriptors are
// explicit, so the layout contract between the TMA's swizzle and the
// descriptors is written here once.
#include "targets/nvptx/WgmmaGemm.h"

#include "targets/common/KernelBuilder.h"
#include "targets/nvptx/WgmmaPipeline.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx {

using namespace mlir;
using T = WgmmaGemmTiling;

namespace {

constexpr int64_t kRowBytes = wgmma::kRowBytes;
// Registers a thread: the producer gives most of its share to the consumers.
constexpr uint32_t kProducerRegs = 40, kConsumerRegs = 232;
static_assert(wgmma::registersFit(kProducerRegs, kConsumerRegs));
constexpr int64_t kConsumerWarps = 8; // two warpgroups
// Row tiles a group of blocks takes before the next column tile: a wave of
// 132 blocks then holds 16 row tiles of x and about 8 column tiles of W, a
// few tens of MB that L2 keeps. Measured on the proxy's 4096-token prefill
// on an H100: groups of 8, 16 and 32 within 1% of each other, the whole
// prefill 7% faster than with row-major order (docs/gpu-notes.md).
constexpr int64_t kGroupRows = 16;

wgmma::RingLayout ringLayout(const T &tiling) {
  return wgmma::RingLayout{tiling.stages, T::kTileM, T::kTileN};
}

class WgmmaGemmBuilder {
public:
  WgmmaGemmBuilder(kernels::KernelScope &k, const T &tiling, int64_t n, int64_t kDim,
                   const std::string &smemName)
      : k(k), b(k.b), tiling(tiling), n(n), kSteps(kDim / T::kTileK), smemName(smemName),
        ctx(b.getContext()), i32(b.getI32Type()) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value rows = k.argIndex(3);
    const int64_t colTiles = (n + T::kTileN - 1) / T::kTileN;
    auto [mt, nt] = tileOfBlock(bid, colTiles);
    m0 = arith::MulIOp::create(b, mt, k.index(T::kTileM));
    n0 = arith::MulIOp::create(b, nt, k.index(T::kTileN));
    Value live = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, m0, rows);
    auto ifLive = scf::IfOp::create(b, live, /*withElse=*/false);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    wgmma::Ring ring(k, ringLayout(tiling), smemName);
    // One arrival a consumer warp frees a stage: each warp arrives once its
    // own wait for the tensor cores has returned.
    ring.initBarriers(tid, 1, kConsumerWarps);

    wgmma::splitRoles(
        k, tid, kProducerRegs, kConsumerRegs,
        [&](Value inGroup) {
          Value issuer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, inGroup, k.index(0));
          auto ifIssuer = scf::IfOp::create(b, issuer, false);
          b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
          produce(ring);
        },
        [&](Value consumer, Value inGroup) {
          store(ring.accumulate(consumer, kSteps, inGroup), consumer, inGroup, rows);
        });
  }

private:
  Value toI32(Value index) { return arith::IndexCastOp::create(b, i32, index); }

  // Block `bid`'s (row tile, column tile). Blocks in launch order take
  // groups of kGroupRows row tiles column by column, down each column
  // first: the blocks resident at once share a few row tiles of x and a few
  // column tiles of W, which stay in L2 while they run. Row-major order
  // instead streams all of W from HBM again every few row tiles.
  std::pair<Value, Value> tileOfBlock(Value bid, int64_t colTiles) {
    Value rowTiles =
        arith::DivUIOp::create(b, gpu::GridDimOp::create(b, gpu::Dimension::x), k.index(colTiles));
    Value perGroup = k.index(kGroupRows * colTiles);
    Value g = arith::DivUIOp::create(b, bid, perGroup);
    Value within = arith::RemUIOp::create(b, bid, perGroup);
    Value first = arith::MulIOp::create(b, g, k.index(kGroupRows));
    // The last group may hold fewer row tiles.
    Value rowsHere =
        arith::MinUIOp::create(b, k.index(kGroupRows), arith::SubIOp::create(b, rowTiles, first));
    return {arith::AddIOp::create(b, first, arith::RemUIOp::create(b, within, rowsHere)),
            arith::DivUIOp::create(b, within, rowsHere)};
  }

  // The producer's one thread: stage after stage, wait until the consumers
  // freed it (the first pass finds every stage free), then have the TMA fill
  // it; the stage's full barrier completes when its bytes have landed.
  void produce(wgmma::Ring &ring) {
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    Value xMap = LLVM::IntToPtrOp::create(b, ptr, k.arg(4));
    Value wMap = LLVM::IntToPtrOp::create(b, ptr, k.arg(5));
    // The runtime writes the maps with copies from the host: order those
    // writes before the copy engine reads the maps.
    for (Value map : {xMap, wMap})
      ring.acquireTensorMap(map);
    auto loop = scf::ForOp::create(b, k.index(0), k.index(kSteps), k.index(1));
    b.setInsertionPointToStart(loop.getBody());
    Value step = loop.getInductionVar();
    auto [s, fullAt] = ring.claim(step);
    ring.expectBytes(fullAt, tiling.stageBytes());
    Value kk = toI32(arith::MulIOp::create(b, step, k.index(T::kTileK)));
    ring.copy(ring.aTile(s), xMap, kk, {m0}, fullAt);
    ring.copy(ring.bTile(s), wMap, kk, {n0}, fullAt);
  }

  // The accumulators of m64nNk16: thread t of the warpgroup holds, for each
  // 8 columns j, rows 16 (t / 32) + (t % 32) / 4 and 8 below it, columns
  // 8j + 2 (t % 4) and the next: registers 4j .. 4j + 3.
  void store(Value sum, Value c, Value inGroup, Value rows) {
    Value y = k.arg(2);
    Value warp = arith::DivUIOp::create(b, inGroup, k.index(32));
    Value lane = arith::RemUIOp::create(b, inGroup, k.index(32));
    Value row0 = arith::AddIOp::create(
        b, arith::AddIOp::create(b, m0, arith::MulIOp::create(b, c, k.index(64))),
        arith::AddIOp::create(b, arith::MulIOp::create(b, warp, k.index(16)),
                              arith::DivUIOp::create(b, lane, k.index(4))));
    Value col0 = arith::AddIOp::create(
        b, n0, arith::MulIOp::create(b, arith::RemUIOp::create(b, lane, k.index(4)), k.index(2)));
    auto vec2 = VectorType::get({2}, b.getF32Type());
    for (int64_t half = 0; half < 2; ++half) {
      Value row = arith::AddIOp::create(b, row0, k.index(8 * half));
      Value rowOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, rows);
      for (int64_t j = 0; j < T::kTileN / 8; ++j) {
        Value col = arith::AddIOp::create(b, col0, k.index(8 * j));
        Value ok = arith::AndIOp::create(
            b, rowOk, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, col, k.index(n)));
        Value v0 = LLVM::ExtractValueOp::create(b, sum, ArrayRef<int64_t>{4 * j + 2 * half});
        Value v1 = LLVM::ExtractValueOp::create(b, sum, ArrayRef<int64_t>{4 * j + 2 * half + 1});
        auto ifOk = scf::IfOp::create(b, ok, false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&ifOk.getThenRegion().front());
        Value pair = vector::FromElementsOp::create(b, vec2, ValueRange{v0, v1});
        // Columns 2 (t % 4) and the next, one 8-byte store.
        vector::StoreOp::create(b, pair, y, ValueRange{row, col}, false, llvm::MaybeAlign(8));
      }
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const T &tiling;
  int64_t n, kSteps;
  std::string smemName;
  MLIRContext *ctx;
  Type i32;
  Value m0, n0;
};

} // namespace

bool wgmmaGemmFits(int64_t n, int64_t k) { return k % T::kTileK == 0 && n % 8 == 0; }

kernels::KernelSpec wgmmaGemm(int64_t n, int64_t k, bool dropLastStep) {
  T tiling;
  const std::string name = std::string("linear_wgmma_") + (dropLastStep ? "broken_" : "") +
                           std::to_string(n) + "x" + std::to_string(k);
  kernels::Tiling described;
  described.set("kind", "wgmma-gemm")
      .set("tile_m", T::kTileM)
      .set("tile_n", T::kTileN)
      .set("tile_k", T::kTileK)
      .set("stages", tiling.stages)
      .set("block", T::kThreads)
      .set("swizzle", 128);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    Type i64 = b.getI64Type();
    return {MemRefType::get({dynamic, k}, b.getBF16Type()),
            MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()),
            i64,
            i64,
            i64};
  };
  const std::string smemName = name + "_smem";
  kernels::KernelSpec spec =
      kernels::buildKernel(name, "kiln.linear", described, args, [&](kernels::KernelScope &scope) {
        wgmma::declareKernel(scope, smemName, T::kThreads);
        WgmmaGemmBuilder(scope, tiling, n, dropLastStep ? k - T::kTileK : k, smemName).build();
      });
  spec.sharedBytes = tiling.sharedBytes();
  return spec;
}

kernels::Work wgmmaGemmWork(int64_t n, int64_t maxTokens) {
  int64_t tiles = ((maxTokens + T::kTileM - 1) / T::kTileM) * ((n + T::kTileN - 1) / T::kTileN);
  return kernels::Work{tiles * T::kThreads, 0, T::kThreads};
}

std::vector<std::string> wgmmaGemmScalars() {
  const std::string x =
      "tmap:0:" + std::to_string(T::kTileK) + "," + std::to_string(T::kTileM) + ":128";
  const std::string w =
      "tmap:1:" + std::to_string(T::kTileK) + "," + std::to_string(T::kTileN) + ":128";
  return {"tokens:0", x, w, "part", "parts"};
}

} // namespace kiln::nvptx
