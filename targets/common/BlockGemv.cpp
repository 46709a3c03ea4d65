// The GPU GEMV of batched decode: y[t, o] = x[t] · W[o] for up to 8 tokens.
// A warp per output row (WarpGemv.cpp) re-reads all of x for every row; at 8
// full-width f32 rows x no longer fits in L1 and that traffic swamps the
// weights'. Here a block of 8 warps owns 32 output rows: per 256 columns the
// block stages every token's slice of x in shared memory once, then each
// warp streams its 4 weight rows (16 bytes a lane) against all tokens, one
// fma chain per (row, token). Lanes are summed with shuffles at the end.
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::kernels {

using namespace mlir;
namespace {

constexpr int64_t kRowsPerWarp = 4, kWarps = 8, kChunk = 256, kLaneElems = 8;

} // namespace

bool blockGemvFits(int64_t k, int64_t tokens) {
  return k % kChunk == 0 && tokens >= 1 && tokens <= kBlockGemvTokens;
}

int64_t blockGemvRows() { return kRowsPerWarp * kWarps; }

// Built as typed IR (KernelBuilder.h).
KernelSpec linearBlockTokens(int64_t n, int64_t k, int64_t tokens) {
  std::string name = "linear_block_tokens" + str(tokens) + "_" + str(n) + "x" + str(k);
  Tiling tiling;
  tiling.set("kind", "block-gemv-tokens")
      .set("rows_per_block", blockGemvRows())
      .set("tokens", tokens);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getF32Type()), MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()), b.getI64Type()};
  };
  return buildKernel(name, "kiln.linear", tiling, args, [&](KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    FloatType f32 = b.getF32Type();
    SharedBuffer staged = declareSharedBuffer(s, name + "_x", {tokens, kChunk}, f32);
    Value x = s.arg(0), w = s.arg(1), y = s.arg(2);
    Value c0 = s.index(0), c1 = s.index(1), c8 = s.index(8), c32 = s.index(32), c4 = s.index(4);
    Value chunk = s.index(kChunk), kdim = s.index(k), ndim = s.index(n), nLast = s.index(n - 1);
    Value rowsPerBlock = s.index(blockGemvRows());
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    SmallVector<Value> tokenC, rowC;
    for (int64_t t = 0; t < tokens; ++t)
      tokenC.push_back(s.index(t));
    for (int64_t r = 0; r < kRowsPerWarp; ++r)
      rowC.push_back(s.index(r));
    Value allTokens = s.index(tokens);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value lane = arith::RemUIOp::create(b, tid, c32);
    Value warp = arith::DivUIOp::create(b, tid, c32);
    Value rows = s.argIndex(3);
    Value lastT = arith::SubIOp::create(b, rows, c1);
    Value lead = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, lane, c0);
    Value blockRow = arith::MulIOp::create(b, bid, rowsPerBlock);
    Value warpRow = arith::MulIOp::create(b, warp, c4);
    Value rowBase = arith::AddIOp::create(b, blockRow, warpRow);
    SmallVector<Value> rowAt, row;
    for (int64_t r = 0; r < kRowsPerWarp; ++r) {
      rowAt.push_back(arith::AddIOp::create(b, rowBase, rowC[r]));
      row.push_back(arith::MinUIOp::create(b, rowAt[r], nLast));
    }
    Value l8 = arith::MulIOp::create(b, lane, c8);
    // Staging: warp w copies token w's 256 columns (tokens past T repeat the last).
    Value stagedToken = arith::MinUIOp::create(b, warp, lastT);
    Value staging = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, warp, allTokens);
    Value sx = staged.get(b);
    // One accumulator a (row, token), row-major.
    SmallVector<Value> init(kRowsPerWarp * tokens, zero);
    auto loop = scf::ForOp::create(b, c0, kdim, chunk, init);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      Value kl = arith::AddIOp::create(b, loop.getInductionVar(), l8);
      {
        auto ifStaging = scf::IfOp::create(b, staging, /*withElse=*/false);
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(&ifStaging.getThenRegion().front());
        auto v8 = VectorType::get({8}, f32);
        Value xv = vector::LoadOp::create(b, v8, x, ValueRange{stagedToken, kl}, false,
                                          llvm::MaybeAlign(32));
        vector::StoreOp::create(b, xv, sx, ValueRange{warp, l8}, false, llvm::MaybeAlign(32));
      }
      gpu::BarrierOp::create(b);
      // The weight rows' slices, as f32 elements.
      SmallVector<SmallVector<Value>> wElems(kRowsPerWarp);
      for (int64_t r = 0; r < kRowsPerWarp; ++r) {
        Value wb = vector::LoadOp::create(b, VectorType::get({kLaneElems}, b.getBF16Type()), w,
                                          ValueRange{row[r], kl}, false, llvm::MaybeAlign(16));
        Value wf = arith::ExtFOp::create(b, VectorType::get({kLaneElems}, f32), wb);
        for (int64_t i = 0; i < kLaneElems; ++i)
          wElems[r].push_back(vector::ExtractOp::create(b, wf, ArrayRef<int64_t>{i}));
      }
      SmallVector<Value> next(kRowsPerWarp * tokens);
      for (int64_t t = 0; t < tokens; ++t) {
        Value xs = vector::LoadOp::create(b, VectorType::get({kLaneElems}, f32), sx,
                                          ValueRange{tokenC[t], l8}, false, llvm::MaybeAlign(32));
        SmallVector<Value> xElems;
        for (int64_t i = 0; i < kLaneElems; ++i)
          xElems.push_back(vector::ExtractOp::create(b, xs, ArrayRef<int64_t>{i}));
        for (int64_t r = 0; r < kRowsPerWarp; ++r) {
          Value chain = loop.getRegionIterArgs()[r * tokens + t];
          for (int64_t i = 0; i < kLaneElems; ++i)
            chain = math::FmaOp::create(b, wElems[r][i], xElems[i], chain);
          next[r * tokens + t] = chain;
        }
      }
      gpu::BarrierOp::create(b);
      scf::YieldOp::create(b, next);
    }
    for (int64_t r = 0; r < kRowsPerWarp; ++r)
      for (int64_t t = 0; t < tokens; ++t) {
        Value sum = kernels::xorShuffleReduce(
            b, loop.getResult(r * tokens + t), {1, 2, 4, 8, 16}, [&](Value own, Value other) {
              return arith::AddFOp::create(b, own, other).getResult();
            });
        Value okT = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tokenC[t], rows);
        Value okR = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, rowAt[r], ndim);
        Value okRT = arith::AndIOp::create(b, okT, okR);
        Value ok = arith::AndIOp::create(b, okRT, lead);
        auto ifOk = scf::IfOp::create(b, ok, /*withElse=*/false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&ifOk.getThenRegion().front());
        memref::StoreOp::create(b, sum, y, ValueRange{tokenC[t], rowAt[r]});
      }
  });
}

} // namespace kiln::kernels
