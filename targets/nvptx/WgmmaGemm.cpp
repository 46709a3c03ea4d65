// Built as typed IR (targets/common/KernelBuilder.h) at the NVVM level: the
// shared-memory addresses, mbarriers, TMA copies and wgmma descriptors are
// explicit, so the layout contract between the TMA's swizzle and the
// descriptors is written here once.
#include "targets/nvptx/WgmmaGemm.h"

#include "targets/common/KernelBuilder.h"

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

// The 128-byte swizzle's atom: 8 rows of 128 bytes (64 bf16 of k). Both
// operands are K-major: a row of the tile is one row of x or W.
constexpr int64_t kRowBytes = T::kTileK * 2;  // 128
constexpr int64_t kAtomBytes = 8 * kRowBytes; // 1024: the descriptors' stride
constexpr int64_t kMmaK = 16;                 // k of one wgmma (bf16)
constexpr int64_t kAccRegs = T::kTileN / 2;   // f32 accumulators a thread
constexpr int64_t kWarpgroup = 128;
// Registers a thread: the producer gives most of its share to the consumers.
constexpr uint32_t kProducerRegs = 40, kConsumerRegs = 232;
constexpr int64_t kConsumerWarps = 8; // two warpgroups

// The wgmma shared-memory matrix descriptor of a K-major, 128-byte-swizzled
// tile at shared address `addr` (1024-byte-aligned atoms; the leading offset
// is unused by this layout, 1 by convention): address >> 4 in bits 0-13,
// leading byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, the
// swizzle mode (1: 128 bytes) in 62-63.
Value matrixDescriptor(ImplicitLocOpBuilder &b, Value addr32) {
  Type i64 = b.getI64Type();
  auto c64 = [&](uint64_t v) { return arith::ConstantIntOp::create(b, i64, int64_t(v)); };
  Value addr = arith::ExtUIOp::create(b, i64, addr32);
  Value start = arith::ShRUIOp::create(b, arith::AndIOp::create(b, addr, c64(0x3FFFF)), c64(4));
  uint64_t fixed = (uint64_t(1) << 16) | (uint64_t(kAtomBytes >> 4) << 32) | (uint64_t(1) << 62);
  return arith::OrIOp::create(b, start, c64(fixed));
}

class WgmmaGemmBuilder {
public:
  WgmmaGemmBuilder(kernels::KernelScope &k, const T &tiling, int64_t n, int64_t kDim,
                   const std::string &smemName)
      : k(k), b(k.b), tiling(tiling), n(n), kSteps(kDim / T::kTileK), smemName(smemName),
        ctx(b.getContext()), i32(b.getI32Type()), ptr3(LLVM::LLVMPointerType::get(ctx, 3)),
        acc(LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(kAccRegs, b.getF32Type()))) {}

  void build() {
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value rows = k.argIndex(3);
    const int64_t colTiles = (n + T::kTileN - 1) / T::kTileN;
    Value mt = arith::DivUIOp::create(b, bid, k.index(colTiles));
    Value nt = arith::RemUIOp::create(b, bid, k.index(colTiles));
    m0 = arith::MulIOp::create(b, mt, k.index(T::kTileM));
    n0 = arith::MulIOp::create(b, nt, k.index(T::kTileN));
    Value live = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, m0, rows);
    auto ifLive = scf::IfOp::create(b, live, /*withElse=*/false);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    smem = LLVM::AddressOfOp::create(b, ptr3, smemName);

    // Thread 0 sets up the barriers; everyone sees them after the barrier.
    Value first = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, k.index(0));
    auto ifFirst = scf::IfOp::create(b, first, false);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifFirst.getThenRegion().front());
      for (int64_t s = 0; s < tiling.stages; ++s) {
        NVVM::MBarrierInitOp::create(b, b.getLoc(), full(k.index(s)), k.i32(1), Value());
        // One arrival a consumer warp frees a stage: each warp arrives once
        // its own wait for the tensor cores has returned.
        NVVM::MBarrierInitOp::create(b, b.getLoc(), empty(k.index(s)), k.i32(kConsumerWarps),
                                     Value());
      }
      NVVM::FenceMbarrierInitOp::create(b, b.getLoc());
    }
    NVVM::Barrier0Op::create(b, b.getLoc());

    Value group = arith::DivUIOp::create(b, tid, k.index(kWarpgroup));
    Value inGroup = arith::RemUIOp::create(b, tid, k.index(kWarpgroup));
    Value producer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, group, k.index(0));
    auto roles = scf::IfOp::create(b, producer, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&roles.getThenRegion().front());
      NVVM::SetMaxRegisterOp::create(b, b.getLoc(), kProducerRegs,
                                     NVVM::SetMaxRegisterAction::decrease);
      Value issuer = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, inGroup, k.index(0));
      auto ifIssuer = scf::IfOp::create(b, issuer, false);
      b.setInsertionPointToStart(&ifIssuer.getThenRegion().front());
      produce();
    }
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&roles.getElseRegion().front());
      NVVM::SetMaxRegisterOp::create(b, b.getLoc(), kConsumerRegs,
                                     NVVM::SetMaxRegisterAction::increase);
      Value consumer = arith::SubIOp::create(b, group, k.index(1));
      consume(consumer, inGroup, rows);
    }
  }

private:
  // Shared addresses: stage s's x tile, W tile, full and empty barriers.
  Value at(Value byteOffset) {
    Value offset = arith::IndexCastOp::create(b, i32, byteOffset);
    return LLVM::GEPOp::create(b, ptr3, b.getI8Type(), smem, ValueRange{offset});
  }
  Value xTile(Value s) { return at(arith::MulIOp::create(b, s, k.index(T::kTileM * kRowBytes))); }
  Value wTile(Value s) {
    Value base = k.index(tiling.stages * T::kTileM * kRowBytes);
    return at(arith::AddIOp::create(b, base,
                                    arith::MulIOp::create(b, s, k.index(T::kTileN * kRowBytes))));
  }
  Value barrier(int64_t which, Value s) {
    Value base = k.index(tiling.stages * tiling.stageBytes() + which * tiling.stages * 8);
    return at(arith::AddIOp::create(b, base, arith::MulIOp::create(b, s, k.index(8))));
  }
  Value full(Value s) { return barrier(0, s); }
  Value empty(Value s) { return barrier(1, s); }
  Value parity(Value step) {
    Value phase = arith::RemUIOp::create(b, arith::DivUIOp::create(b, step, k.index(tiling.stages)),
                                         k.index(2));
    return arith::IndexCastOp::create(b, i32, phase);
  }
  void wait(Value barrierAddr, Value phase) {
    NVVM::MBarrierTryWaitParityOp::create(b, b.getLoc(), barrierAddr, phase, k.i32(10000000));
  }
  Value shared32(Value ptr) { return LLVM::PtrToIntOp::create(b, i32, ptr); }
  Value toI32(Value index) { return arith::IndexCastOp::create(b, i32, index); }

  // The producer's one thread: stage after stage, wait until the consumers
  // freed it (the first pass finds every stage free), then have the TMA fill
  // it; the stage's full barrier completes when its bytes have landed.
  void produce() {
    Type ptr = LLVM::LLVMPointerType::get(ctx);
    Value xMap = LLVM::IntToPtrOp::create(b, ptr, k.arg(4));
    Value wMap = LLVM::IntToPtrOp::create(b, ptr, k.arg(5));
    // The runtime writes the maps with copies from the host: order those
    // writes before the copy engine reads the maps.
    for (Value map : {xMap, wMap})
      NVVM::FenceProxyAcquireOp::create(b, b.getLoc(), NVVM::MemScopeKind::GPU, map, k.i32(128),
                                        NVVM::ProxyKind::GENERIC, NVVM::ProxyKind::TENSORMAP);
    auto ptr7 = LLVM::LLVMPointerType::get(ctx, 7); // shared::cluster, as the copy names it
    auto loop = scf::ForOp::create(b, k.index(0), k.index(kSteps), k.index(1));
    b.setInsertionPointToStart(loop.getBody());
    Value step = loop.getInductionVar();
    Value s = arith::RemUIOp::create(b, step, k.index(tiling.stages));
    Value freed = arith::XOrIOp::create(b, parity(step), k.i32(1));
    wait(empty(s), freed);
    Value fullAt = full(s);
    NVVM::MBarrierArriveExpectTxOp::create(b, b.getLoc(), Type(), fullAt,
                                           k.i32(tiling.stageBytes()), NVVM::MemScopeKind::CTA,
                                           false, Value());
    Value kk = toI32(arith::MulIOp::create(b, step, k.index(T::kTileK)));
    auto copy = [&](Value dst, Value map, Value row) {
      Value cluster = LLVM::AddrSpaceCastOp::create(b, ptr7, dst);
      NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
          b, b.getLoc(), cluster, map, ValueRange{kk, toI32(row)}, fullAt, ValueRange{}, Value(),
          Value(), NVVM::TMALoadMode::TILE, false, nullptr, Value());
    };
    copy(xTile(s), xMap, m0);
    copy(wTile(s), wMap, n0);
  }

  // A consumer warpgroup: rows 64c .. 64c + 63 of the tile, all its columns.
  void consume(Value c, Value inGroup, Value rows) {
    Value zero = LLVM::ZeroOp::create(b, acc);
    auto loop = scf::ForOp::create(b, k.index(0), k.index(kSteps), k.index(1), ValueRange{zero});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value step = loop.getInductionVar();
      Value s = arith::RemUIOp::create(b, step, k.index(tiling.stages));
      wait(full(s), parity(step));
      Value xRows = arith::AddIOp::create(
          b, shared32(xTile(s)), toI32(arith::MulIOp::create(b, c, k.index(64 * kRowBytes))));
      Value wRows = shared32(wTile(s));
      NVVM::WgmmaFenceAlignedOp::create(b, b.getLoc());
      Value sum = loop.getRegionIterArgs()[0];
      for (int64_t kk = 0; kk < T::kTileK / kMmaK; ++kk) {
        Value advance = k.i32(kk * kMmaK * 2); // bytes along the 128-byte row
        Value descX = matrixDescriptor(b, arith::AddIOp::create(b, xRows, advance));
        Value descW = matrixDescriptor(b, arith::AddIOp::create(b, wRows, advance));
        sum = NVVM::WgmmaMmaAsyncOp::create(b, b.getLoc(), acc, sum, descX, descW,
                                            NVVM::MMAShapeAttr::get(ctx, 64, T::kTileN, kMmaK),
                                            NVVM::WGMMATypes::bf16, NVVM::WGMMATypes::bf16,
                                            NVVM::WGMMATypes::f32, NVVM::WGMMAScaleOut::one,
                                            NVVM::WGMMAScaleIn::one, NVVM::WGMMAScaleIn::one,
                                            NVVM::MMALayout::row, NVVM::MMALayout::col, nullptr);
      }
      NVVM::WgmmaGroupSyncAlignedOp::create(b, b.getLoc());
      // The step before this one has finished reading its stage: free it.
      NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 1);
      Value lane0 = arith::CmpIOp::create(
          b, arith::CmpIPredicate::eq, arith::RemUIOp::create(b, inGroup, k.index(32)), k.index(0));
      Value release = arith::AndIOp::create(
          b, lane0, arith::CmpIOp::create(b, arith::CmpIPredicate::ugt, step, k.index(0)));
      auto ifRelease = scf::IfOp::create(b, release, false);
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&ifRelease.getThenRegion().front());
        Value previous = arith::RemUIOp::create(
            b, arith::AddIOp::create(b, step, k.index(tiling.stages - 1)), k.index(tiling.stages));
        NVVM::MBarrierArriveOp::create(b, b.getLoc(), Type(), empty(previous), Value(),
                                       NVVM::MemScopeKind::CTA, false);
      }
      scf::YieldOp::create(b, sum);
    }
    NVVM::WgmmaWaitGroupSyncOp::create(b, b.getLoc(), 0);
    store(loop.getResult(0), c, inGroup, rows);
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
        vector::StoreOp::create(b, pair, y, ValueRange{row, col});
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
  LLVM::LLVMPointerType ptr3;
  LLVM::LLVMStructType acc;
  Value m0, n0, smem;
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
        // The dynamic shared memory: an external shared array, 1024-byte
        // aligned for the swizzle atoms.
        {
          OpBuilder::InsertionGuard guard(scope.b);
          scope.b.setInsertionPoint(scope.func);
          LLVM::GlobalOp::create(scope.b, LLVM::LLVMArrayType::get(scope.b.getI8Type(), 0),
                                 /*isConstant=*/false, LLVM::Linkage::External, smemName,
                                 Attribute(), /*alignment=*/1024, /*addrSpace=*/3);
        }
        // A register cap at entry, which setmaxnreg needs.
        scope.func->setAttr("nvvm.maxntid",
                            scope.b.getDenseI32ArrayAttr({int32_t(T::kThreads), 1, 1}));
        scope.func->setAttr("nvvm.minctasm", scope.b.getI32IntegerAttr(1));
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
