#include "targets/amdgcn/MfmaGemm.h"

#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/ROCDLDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::amdgcn {

using namespace mlir;

namespace {

constexpr int64_t kTile = 32, kWave = 64, kStepK = 8;

int64_t tiles(int64_t n) { return (n + kTile - 1) / kTile; }

} // namespace

bool mfmaGemmFits(int64_t n, int64_t k) { return k % kStepK == 0 && n >= 1; }

kernels::Work mfmaGemmWork(int64_t n, int64_t maxTokens) {
  return kernels::Work{tiles(maxTokens) * tiles(n) * kWave, 0, kWave};
}

// Built as typed IR (KernelBuilder.h).
kernels::KernelSpec mfmaGemm(int64_t n, int64_t k) {
  kernels::Tiling tiling;
  tiling.set("kind", "mfma-gemm")
      .set("tile", std::vector<int64_t>{kTile, kTile, kStepK})
      .set("block", kWave);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getF32Type()), MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()), b.getI64Type()};
  };
  const std::string name = "linear_mfma_" + std::to_string(n) + "x" + std::to_string(k);
  return kernels::buildKernel(name, "kiln.linear", tiling, args, [&](kernels::KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    Value c0 = s.index(0), c1 = s.index(1), c4 = s.index(4), c8 = s.index(kStepK),
          c32 = s.index(kTile);
    Value kdim = s.index(k), ndim = s.index(n), nLast = s.index(n - 1),
          colTiles = s.index(tiles(n));
    Value zeroI32 = arith::ConstantIntOp::create(b, b.getI32Type(), 0);
    auto accType = VectorType::get({16}, b.getF32Type());
    Value zeroAcc = arith::ConstantOp::create(b, DenseElementsAttr::get(accType, 0.0f));
    Value lane = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value rows = s.argIndex(3);
    Value mt = arith::DivUIOp::create(b, bid, colTiles);
    Value nt = arith::RemUIOp::create(b, bid, colTiles);
    Value m0 = arith::MulIOp::create(b, mt, c32);
    Value n0 = arith::MulIOp::create(b, nt, c32);
    auto ifLive =
        scf::IfOp::create(b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, m0, rows),
                          /*withElse=*/false);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    Value l32 = arith::RemUIOp::create(b, lane, c32);
    Value half4 = arith::MulIOp::create(b, arith::DivUIOp::create(b, lane, c32), c4);
    // This lane's token and weight row; past T or n they repeat the last,
    // and their results are not stored.
    Value lastRow = arith::SubIOp::create(b, rows, c1);
    Value arow = arith::MinUIOp::create(b, arith::AddIOp::create(b, m0, l32), lastRow);
    Value col = arith::AddIOp::create(b, n0, l32);
    Value brow = arith::MinUIOp::create(b, col, nLast);
    Value colOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, col, ndim);
    auto loop = scf::ForOp::create(b, c0, kdim, c8, ValueRange{zeroAcc});
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value k0 = arith::AddIOp::create(b, loop.getInductionVar(), half4);
      MfmaActivation a = mfmaActivation(b, s.arg(0), ValueRange{arow, k0});
      Value wv = vector::LoadOp::create(b, VectorType::get({4}, b.getBF16Type()), s.arg(1),
                                        ValueRange{brow, k0}, false, llvm::MaybeAlign(8));
      Value wi = vector::BitCastOp::create(b, VectorType::get({4}, b.getI16Type()), wv);
      Value a1 = mfmaStep(b, a.hi, wi, loop.getRegionIterArgs()[0], zeroI32);
      scf::YieldOp::create(b, ValueRange{mfmaStep(b, a.lo, wi, a1, zeroI32)});
    }
    // The 16 results of lane l: rows 8 (j / 4) + 4 (l / 32) + j % 4 of the tile.
    for (int64_t j = 0; j < 16; ++j) {
      Value off = s.index(8 * (j / 4) + j % 4);
      Value r = arith::AddIOp::create(b, m0, arith::AddIOp::create(b, half4, off));
      Value ok = arith::AndIOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, r, rows), colOk);
      auto ifOk = scf::IfOp::create(b, ok, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOk.getThenRegion().front());
      Value v = vector::ExtractOp::create(b, loop.getResult(0), ArrayRef<int64_t>{j});
      memref::StoreOp::create(b, v, s.arg(2), ValueRange{r, col});
    }
  });
}

MfmaActivation mfmaActivation(ImplicitLocOpBuilder &b, Value x, ValueRange at) {
  auto f32x4 = VectorType::get({4}, b.getF32Type());
  auto bf16x4 = VectorType::get({4}, b.getBF16Type());
  auto i16x4 = VectorType::get({4}, b.getI16Type());
  Value xv = vector::LoadOp::create(b, f32x4, x, at, false, llvm::MaybeAlign(16));
  Value hi = arith::TruncFOp::create(b, bf16x4, xv);
  Value rest = arith::SubFOp::create(b, xv, arith::ExtFOp::create(b, f32x4, hi));
  Value lo = arith::TruncFOp::create(b, bf16x4, rest);
  MfmaActivation a;
  a.hi = vector::BitCastOp::create(b, i16x4, hi);
  a.lo = vector::BitCastOp::create(b, i16x4, lo);
  return a;
}

Value mfmaStep(ImplicitLocOpBuilder &b, Value a, Value bOperand, Value c, Value zeroI32) {
  return ROCDL::mfma_f32_32x32x8bf16_1k::create(
      b, c.getType(), ValueRange{a, bOperand, c, zeroI32, zeroI32, zeroI32});
}

} // namespace kiln::amdgcn
