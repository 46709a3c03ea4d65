// Built as typed IR (KernelBuilder.h).
#include "targets/nvptx/MmaGemm.h"

#include "targets/nvptx/MmaTile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <memory>

namespace kiln::nvptx {

using namespace mlir;
using kernels::str;

namespace {

// Row tiles that run over the same weight columns one after another.
constexpr int64_t kGroupM = 8;
// Split-K where the tiles do not fill the chip (a single row tile in batched
// decode; the router's 256 columns of prefill, kept exact on mma.sync): a
// block's k steps run one after another behind a barrier each, so a GEMM of
// few tiles leaves most of the GPU idle. Splits double while the blocks stay
// within two per SM of the chip and each split keeps 8 k steps.
constexpr int64_t kBlocksPerSM = 2, kMinSplitSteps = 8;

int64_t colTiles(int64_t n) { return (n + kMmaTileN - 1) / kMmaTileN; }

} // namespace

bool mmaGemmFits(int64_t n, int64_t k) { return k % kMmaTileK == 0 && n % 8 == 0; }

int64_t mmaGemmSplits(int64_t n, int64_t k, int64_t maxTokens, int64_t sms) {
  int64_t rowTiles = (maxTokens + kMmaTileM - 1) / kMmaTileM, tiles = rowTiles * colTiles(n);
  int64_t splits = 1;
  while (tiles * splits * 2 <= kBlocksPerSM * sms && k % (2 * splits * kMmaTileK) == 0 &&
         k / (2 * splits) >= kMinSplitSteps * kMmaTileK)
    splits *= 2;
  return splits;
}

kernels::Work mmaGemmWork(int64_t n, int64_t maxTokens, int64_t splits) {
  int64_t rowTiles = (maxTokens + kMmaTileM - 1) / kMmaTileM;
  return kernels::Work{rowTiles * colTiles(n) * splits * kMmaThreads, 0, kMmaThreads};
}

kernels::KernelSpec mmaGemm(int64_t n, int64_t k, int64_t splits) {
  MmaTileKernel kernel;
  kernel.name = "linear_mma_" + (splits > 1 ? "split" + str(splits) + "_" : std::string()) +
                str(n) + "x" + str(k);
  kernel.op = "kiln.linear";
  kernel.tiling.set("kind", "mma-gemm")
      .set("tile", std::vector<int64_t>{kMmaTileM, kMmaTileN, kMmaTileK})
      .set("block", kMmaThreads);
  if (splits > 1)
    kernel.tiling.set("splits", splits);
  // Split-K writes each split's sums to its own slice; mmaGemmSum adds them.
  kernel.args = [=](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type();
    const int64_t dyn = ShapedType::kDynamic;
    Type y = splits > 1 ? MemRefType::get({splits, dyn, n}, f32) : MemRefType::get({dyn, n}, f32);
    return {MemRefType::get({dyn, k}, f32), MemRefType::get({n, k}, b.getBF16Type()), y,
            b.getI64Type()};
  };
  kernel.k = k;
  kernel.kRange = splits > 1;
  // What setup and rows define for the loads and the epilogue.
  struct Tile {
    Value split, ndim, nLast, rows, m0, n0, arow, brow;
  };
  auto tile = std::make_shared<Tile>();
  kernel.setup = [=](MmaTileScope &s) -> Value {
    ImplicitLocOpBuilder &b = s.b;
    Value blocks, tileBid;
    if (splits == 1) {
      tileBid = arith::AddIOp::create(b, s.bid, s.c0);
      blocks = gpu::GridDimOp::create(b, gpu::Dimension::x);
    } else {
      // Split s of the reduction is blocks s * tiles .. (s + 1) * tiles - 1.
      Value count = s.k.index(splits), span = s.k.index(k / splits);
      Value all = gpu::GridDimOp::create(b, gpu::Dimension::x);
      blocks = arith::DivUIOp::create(b, all, count);
      tile->split = arith::DivUIOp::create(b, s.bid, blocks);
      tileBid = arith::RemUIOp::create(b, s.bid, blocks);
      s.kBegin = arith::MulIOp::create(b, tile->split, span);
      s.kEnd = arith::AddIOp::create(b, s.kBegin, span);
      s.kFinal = arith::SubIOp::create(b, s.kEnd, s.c32);
    }
    // Groups of row tiles over the same weight columns; the row tile
    // changes fastest inside a group.
    Value cols = s.k.index(colTiles(n)), groupM = s.k.index(kGroupM);
    Value groupBlocks = s.k.index(kGroupM * colTiles(n));
    tile->ndim = s.k.index(n);
    tile->nLast = s.k.index(n - 1);
    Value rowTiles = arith::DivUIOp::create(b, blocks, cols);
    tile->rows = s.k.argIndex(3);
    Value group = arith::DivUIOp::create(b, tileBid, groupBlocks);
    Value inGroup = arith::RemUIOp::create(b, tileBid, groupBlocks);
    Value groupFirst = arith::MulIOp::create(b, group, groupM);
    Value groupSize =
        arith::MinUIOp::create(b, arith::SubIOp::create(b, rowTiles, groupFirst), groupM);
    Value mtIn = arith::RemUIOp::create(b, inGroup, groupSize);
    Value nt = arith::DivUIOp::create(b, inGroup, groupSize);
    Value mt = arith::AddIOp::create(b, groupFirst, mtIn);
    tile->m0 = arith::MulIOp::create(b, mt, s.c128);
    tile->n0 = arith::MulIOp::create(b, nt, s.c128);
    return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tile->m0, tile->rows);
  };
  // Rows past T or n repeat the last one; their results are dropped.
  kernel.rows = [=](MmaTileScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    Value lastRow = arith::SubIOp::create(b, tile->rows, s.c1);
    tile->arow = arith::MinUIOp::create(b, arith::AddIOp::create(b, tile->m0, s.lrow), lastRow);
    tile->brow = arith::MinUIOp::create(b, arith::AddIOp::create(b, tile->n0, s.lrow), tile->nLast);
  };
  kernel.load = [=](MmaTileScope &s, Value at) {
    ImplicitLocOpBuilder &b = s.b;
    MmaStaged staged;
    staged.a = mmaActivationLoad(s, s.k.arg(0), tile->arow, at);
    Value w[2];
    for (int64_t i = 0; i < 2; ++i) {
      Value in = arith::AddIOp::create(b, s.lk, s.k.index(8 * i));
      w[i] = vector::LoadOp::create(b, VectorType::get({8}, b.getBF16Type()), s.k.arg(1),
                                    ValueRange{tile->brow, arith::AddIOp::create(b, at, in)}, false,
                                    llvm::MaybeAlign(16));
    }
    staged.w0 = w[0];
    staged.w1 = w[1];
    return staged;
  };
  kernel.finish = [](MmaTileScope &, const MmaStaged &staged) {
    return std::make_pair(staged.w0, staged.w1);
  };
  // c0 c1 at row ra[i], c2 c3 at ra8[i], columns col[j] and the next.
  kernel.epilogue = [=](MmaTileScope &s, ValueRange res) {
    ImplicitLocOpBuilder &b = s.b;
    Value colOk[4], col[4];
    for (int64_t j = 0; j < 4; ++j) {
      Value base = arith::AddIOp::create(b, tile->n0, s.rbWarp[j]);
      colOk[j] = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, base, tile->ndim);
      col[j] = arith::AddIOp::create(b, base, arith::MulIOp::create(b, s.t, s.c2));
    }
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t half = 0; half < 2; ++half) {
          Value e0 = LLVM::ExtractValueOp::create(b, res[4 * i + j], ArrayRef<int64_t>{2 * half});
          Value e1 =
              LLVM::ExtractValueOp::create(b, res[4 * i + j], ArrayRef<int64_t>{2 * half + 1});
          Value row = arith::AddIOp::create(b, tile->m0, half ? s.ra8[i] : s.ra[i]);
          Value in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, tile->rows);
          auto ok = scf::IfOp::create(b, arith::AndIOp::create(b, in, colOk[j]), false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(&ok.getThenRegion().front());
          Value v = vector::FromElementsOp::create(b, VectorType::get({2}, b.getF32Type()),
                                                   ValueRange{e0, e1});
          SmallVector<Value> at;
          if (splits > 1)
            at.push_back(tile->split);
          at.push_back(row);
          at.push_back(col[j]);
          vector::StoreOp::create(b, v, s.k.arg(2), at, false, llvm::MaybeAlign(8));
        }
  };
  return buildMmaTileKernel(kernel);
}

kernels::KernelSpec mmaGemmSum(int64_t n, int64_t splits) {
  std::string name = "linear_mma_sum" + str(splits) + "_" + str(n);
  kernels::Tiling tiling;
  tiling.set("kind", "split-k-sum").set("splits", splits);
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type();
    return {MemRefType::get({splits, ShapedType::kDynamic, n}, f32),
            MemRefType::get({ShapedType::kDynamic, n}, f32), b.getI64Type()};
  };
  return kernels::buildKernel(name, "kiln.linear", tiling, args, [&](kernels::KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Value ndim = k.index(n), rows = k.argIndex(2);
    Value count = arith::MulIOp::create(b, rows, ndim);
    Value first = k.argIndex(3), step = k.argIndex(4);
    auto loop = scf::ForOp::create(b, first, count, step);
    b.setInsertionPointToStart(loop.getBody());
    Value t = arith::DivUIOp::create(b, loop.getInductionVar(), ndim);
    Value c = arith::RemUIOp::create(b, loop.getInductionVar(), ndim);
    Value sum;
    for (int64_t s = 0; s < splits; ++s) {
      Value at = k.index(s);
      Value part = memref::LoadOp::create(b, k.arg(0), ValueRange{at, t, c});
      sum = s ? arith::AddFOp::create(b, sum, part).getResult() : part;
    }
    memref::StoreOp::create(b, sum, k.arg(1), ValueRange{t, c});
  });
}

kernels::Work mmaGemmSumWork(int64_t n) { return kernels::Work{0, (n + 127) / 128 * 128}; }

} // namespace kiln::nvptx
