#include "targets/nvptx/NarrowLinear.h"

#include "targets/common/KernelBuilder.h"
#include "targets/nvptx/NarrowMma.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx {

using namespace mlir;
using narrow::kChunk;
using narrow::kItems;
using narrow::kWarpRows;

namespace {

constexpr int64_t kBlock = 128;
constexpr int64_t kMaxSplits = 32;
constexpr int64_t kWarpsPerSM = 8;
constexpr int64_t kMaxGroups = 8; // 64 rows: 64 accumulators a thread

constexpr int64_t kWarpGroups = 4; // groups a warp carries: 32 accumulators a thread

int64_t groupsOf(int64_t maxTokens) { return (maxTokens + kItems - 1) / kItems; }
// More groups than a warp carries go to several warps over the same rows
// (neighbours in the grid, so the second read of the weights hits the
// caches): fewer registers, more warps an SM, more loads in flight.
int64_t tokenParts(int64_t maxTokens) {
  return (groupsOf(maxTokens) + kWarpGroups - 1) / kWarpGroups;
}
int64_t warpGroups(int64_t maxTokens) {
  return (groupsOf(maxTokens) + tokenParts(maxTokens) - 1) / tokenParts(maxTokens);
}
// A split covers whole chunks.
bool splitFits(int64_t k, int64_t splits) { return k % (splits * kChunk) == 0; }

} // namespace

bool narrowLinearFits(int64_t n, int64_t k, int64_t maxTokens) {
  return n % kWarpRows == 0 && k % kChunk == 0 && maxTokens >= 2 &&
         groupsOf(maxTokens) <= kMaxGroups;
}

int64_t narrowLinearSplits(int64_t n, int64_t k, int64_t maxTokens, int64_t sms) {
  // The parts' sums cross memory twice (written, then added): at most a
  // quarter of the weights' bytes, 4 x 2 x splits x T x n against 2 x n x k.
  auto partsCheap = [&](int64_t splits) { return 16 * splits * maxTokens <= k; };
  int64_t splits = 1;
  while (n / kWarpRows * tokenParts(maxTokens) * splits < kWarpsPerSM * sms &&
         splits < kMaxSplits && splitFits(k, 2 * splits) && partsCheap(2 * splits))
    splits *= 2;
  return splits;
}

kernels::Work narrowLinearWork(int64_t n, int64_t maxTokens, int64_t splits) {
  int64_t threads = n / kWarpRows * tokenParts(maxTokens) * splits * 32;
  return kernels::Work{(threads + kBlock - 1) / kBlock * kBlock, 0, kBlock};
}

kernels::KernelSpec narrowLinear(int64_t n, int64_t k, int64_t maxTokens, int64_t splits) {
  const std::string name =
      "linear_narrow_" + (splits > 1 ? "split" + std::to_string(splits) + "_" : std::string()) +
      "t" + std::to_string(maxTokens) + "_" + std::to_string(n) + "x" + std::to_string(k);
  const int64_t span = k / splits, groups = warpGroups(maxTokens), parts = tokenParts(maxTokens);
  const int64_t perStep = narrow::chunksPerStep(span, false);
  kernels::Tiling tiling;
  tiling.set("kind", "mma-narrow-linear")
      .set("block", kBlock)
      .set("rows", kWarpRows)
      .set("items", kItems)
      .set("chunk", kChunk)
      .set("chunks_per_step", perStep)
      .set("splits", splits)
      .set("token_parts", parts);
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getF32Type()), MemRefType::get({n, k}, b.getBF16Type()),
            splits > 1 ? MemRefType::get({splits, dynamic, n}, b.getF32Type())
                       : MemRefType::get({dynamic, n}, b.getF32Type()),
            b.getI64Type()};
  };
  return kernels::buildKernel(name, "kiln.linear", tiling, args, [&](kernels::KernelScope &s) {
    ImplicitLocOpBuilder &b = s.b;
    Type i32 = b.getI32Type();
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value warp = arith::AddIOp::create(b, arith::MulIOp::create(b, bid, s.index(kBlock / 32)),
                                       arith::DivUIOp::create(b, tid, s.index(32)));
    Value lane = arith::RemUIOp::create(b, tid, s.index(32));
    Value rowWarps = s.index(n / kWarpRows);
    auto ifLive = scf::IfOp::create(b,
                                    arith::CmpIOp::create(b, arith::CmpIPredicate::ult, warp,
                                                          s.index(n / kWarpRows * parts * splits)),
                                    /*withElse=*/false);
    b.setInsertionPointToStart(&ifLive.getThenRegion().front());
    // Warp (split, row warp, token part), the token part fastest.
    Value part = arith::RemUIOp::create(b, warp, s.index(parts));
    Value rest = arith::DivUIOp::create(b, warp, s.index(parts));
    Value split = arith::DivUIOp::create(b, rest, rowWarps);
    Value rowWarp = arith::RemUIOp::create(b, rest, rowWarps);
    // This warp's first token.
    Value token0 = arith::MulIOp::create(b, part, s.index(kItems * groups));
    Value g = arith::DivUIOp::create(b, lane, s.index(4));
    Value t = arith::RemUIOp::create(b, lane, s.index(4));
    Value tokens = s.argIndex(3);
    Value lastToken = arith::SubIOp::create(b, tokens, s.index(1));
    Value rowA = arith::AddIOp::create(b, arith::MulIOp::create(b, rowWarp, s.index(kWarpRows)), g);
    SmallVector<Value> rows;
    for (int64_t r = 0; r < narrow::kRows; ++r)
      rows.push_back(arith::AddIOp::create(b, rowA, s.index(8 * r)));
    // This split's first chunk and column.
    Value chunk0 = arith::MulIOp::create(b, split, s.index(span / kChunk));
    Value col0 = arith::MulIOp::create(b, split, s.index(span));
    // Group j's B row: token 8 j + g (the last token where there are fewer).
    SmallVector<Value> sourceTokens;
    for (int64_t j = 0; j < groups; ++j)
      sourceTokens.push_back(arith::MinUIOp::create(
          b, arith::AddIOp::create(b, token0, arith::AddIOp::create(b, s.index(kItems * j), g)),
          lastToken));

    auto rowOf = [&](int64_t r, Value chunk, SmallVectorImpl<Value> &raw) {
      Value col = arith::AddIOp::create(
          b, arith::MulIOp::create(b, arith::AddIOp::create(b, chunk0, chunk), s.index(kChunk)),
          arith::MulIOp::create(b, t, s.index(16)));
      Value values = vector::LoadOp::create(b, VectorType::get({16}, b.getBF16Type()), s.arg(1),
                                            ValueRange{rows[r], col}, false, llvm::MaybeAlign(16));
      raw.push_back(vector::BitCastOp::create(b, VectorType::get({8}, i32), values));
    };
    auto xOf = [&](int64_t j, Value col) {
      return vector::LoadOp::create(
                 b, VectorType::get({4}, b.getF32Type()), s.arg(0),
                 ValueRange{sourceTokens[j], arith::AddIOp::create(b, col0, col)}, false,
                 llvm::MaybeAlign(16))
          .getResult();
    };
    narrow::Operands ops;
    ops.in = span;
    ops.nvfp4 = false;
    ops.steps = span / (kChunk * perStep);
    ops.g = g;
    ops.t = t;
    ops.loadRow = rowOf;
    ops.loadX = xOf;
    SmallVector<Value> sums = narrow::products(s, ops, groups);

    // Thread (g, t) holds tokens 8 j + 2 t and 8 j + 2 t + 1 of each group.
    for (int64_t j = 0; j < groups; ++j)
      for (int64_t col = 0; col < 2; ++col) {
        Value token =
            arith::AddIOp::create(b, token0,
                                  arith::AddIOp::create(b, arith::MulIOp::create(b, t, s.index(2)),
                                                        s.index(kItems * j + col)));
        auto ifToken = scf::IfOp::create(
            b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, token, tokens), false);
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(&ifToken.getThenRegion().front());
        for (int64_t tile = 0; tile < 2; ++tile)
          for (int64_t half = 0; half < 2; ++half) {
            Value v = sums[8 * j + 4 * tile + 2 * half + col];
            Value row = rows[2 * tile + half];
            if (splits > 1)
              memref::StoreOp::create(b, v, s.arg(2), ValueRange{split, token, row});
            else
              memref::StoreOp::create(b, v, s.arg(2), ValueRange{token, row});
          }
      }
  });
}

} // namespace kiln::nvptx
