// y = x · Wᵀ. With bf16 weights in VNNI blocks (WeightTransform VnniBf16)
// the product runs on AMX tiles: C[16x16 f32] += A[16x32 bf16]
// · B[32x16 bf16] per tdpbf16ps, A rows read from a bf16 copy of the input
// padded to 16 rows. Launch parts split the 16-column tiles of N, so each
// weight block is streamed by one part only. Built as typed IR
// (targets/common/KernelBuilder.h).
#include "targets/x86/AmxGemm.h"

#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/AMX/AMXDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::x86 {

using namespace mlir;
using kernels::KernelScope;

namespace {

// What both forms share: the arguments, the rows rounded up to whole tiles,
// the tiles of B and their loads.
class AmxGemmBuilder {
public:
  AmxGemmBuilder(KernelScope &k, int64_t n, int64_t kDim) : k(k), b(k.b), n(n), kDim(kDim) {
    accType = amx::TileType::get({16, 16}, b.getF32Type());
    inType = amx::TileType::get({16, 32}, b.getBF16Type());
  }

  // c0, then the constants `extra` (made in between, as the kernels
  // need them), then c16, c32 and the rows in whole 16-row tiles.
  void header(ArrayRef<int64_t> extra) {
    c0 = k.index(0);
    for (int64_t v : extra)
      constants.push_back(k.index(v));
    c16 = k.index(16);
    c32 = k.index(32);
    // Whole 16-row tiles: the rows asked for, rounded up (x is padded).
    Value c15 = k.index(15);
    Value rowsT = k.argIndex(3);
    Value rowsUp = arith::AddIOp::create(b, rowsT, c15);
    Value rowTiles = arith::DivUIOp::create(b, rowsUp, c16);
    rows = arith::MulIOp::create(b, rowTiles, c16);
  }
  // The part's share [begin, end) of `count` column tiles (or pairs).
  std::pair<Value, Value> columns(Value count) {
    unsigned args = k.func.getNumArguments();
    Value part = k.argIndex(args - 2);
    Value parts = k.argIndex(args - 1);
    return kernels::partRange(b, count, part, parts);
  }
  Value loadA(Value m, Value kk) {
    return amx::TileLoadOp::create(b, inType, k.arg(0), ValueRange{m, kk});
  }
  Value loadB(Value brow) {
    return amx::TileLoadOp::create(b, inType, k.arg(1), ValueRange{brow, c0});
  }
  Value mul(Value a, Value bt, Value acc) {
    return amx::TileMulFOp::create(b, accType, a, bt, acc);
  }
  void store(Value m, Value col, Value acc) {
    amx::TileStoreOp::create(b, k.arg(2), ValueRange{m, col}, acc);
  }

  KernelScope &k;
  ImplicitLocOpBuilder &b;
  int64_t n, kDim;
  amx::TileType accType, inType;
  SmallVector<Value> constants;
  Value c0, c16, c32, rows;
};

kernels::Tiling amxTiling(int64_t block) {
  kernels::Tiling tiling;
  tiling.set("kind", "amx")
      .set("tile_m", 16)
      .set("tile_n", 16)
      .set("tile_k", 32)
      .set("block_m", block)
      .set("block_n", block)
      .set("order", "n-m-k")
      .set("parallel", "n");
  return tiling;
}

std::function<std::vector<Type>(Builder &)> amxArgs(int64_t n, int64_t k) {
  return [n, k](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getBF16Type()),
            MemRefType::get({dynamic, 32}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()), b.getI64Type()};
  };
}

// One 16-column tile of N at a time (odd tile counts).
kernels::KernelSpec linearAmxSingle(int64_t n, int64_t k) {
  std::string name = "linear_amx_" + std::to_string(n) + "x" + std::to_string(k);
  return kernels::buildKernel(
      name, "kiln.linear", amxTiling(1), amxArgs(n, k), [&](KernelScope &s) {
        ImplicitLocOpBuilder &b = s.b;
        AmxGemmBuilder g(s, n, k);
        g.header({});
        Value kdim = s.index(k), kblocks = s.index(k / 32), ntiles = s.index(n / 16);
        auto [begin, end] = g.columns(ntiles);
        Value one = s.index(1);
        auto tiles = scf::ForOp::create(b, begin, end, one);
        b.setInsertionPointToStart(tiles.getBody());
        Value nt = tiles.getInductionVar();
        Value col = arith::MulIOp::create(b, nt, g.c16);
        Value firstBlock = arith::MulIOp::create(b, nt, kblocks);
        auto rowsLoop = scf::ForOp::create(b, g.c0, g.rows, g.c16);
        b.setInsertionPointToStart(rowsLoop.getBody());
        Value m = rowsLoop.getInductionVar();
        Value zero = amx::TileZeroOp::create(b, g.accType);
        auto kLoop = scf::ForOp::create(b, g.c0, kdim, g.c32, ValueRange{zero});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(kLoop.getBody());
          Value kk = kLoop.getInductionVar();
          Value ta = g.loadA(m, kk);
          Value kb = arith::DivUIOp::create(b, kk, g.c32);
          Value block = arith::AddIOp::create(b, firstBlock, kb);
          Value brow = arith::MulIOp::create(b, block, g.c16);
          Value tb = g.loadB(brow);
          scf::YieldOp::create(b, ValueRange{g.mul(ta, tb, kLoop.getRegionIterArgs()[0])});
        }
        g.store(m, col, kLoop.getResult(0));
      });
}

} // namespace

// Pairs of 16-column tiles, and pairs of 16-row tiles while the rows allow:
// four accumulators share each A and B tile load (2 A + 2 B + 4 C = the 8
// AMX tile registers); the last 16 rows, if the row count is an odd number of
// tiles, use two accumulators.
kernels::KernelSpec linearAmx(int64_t n, int64_t k) {
  if ((n / 16) % 2 != 0)
    return linearAmxSingle(n, k);
  std::string name = "linear_amx_" + std::to_string(n) + "x" + std::to_string(k);
  return kernels::buildKernel(
      name, "kiln.linear", amxTiling(2), amxArgs(n, k), [&](KernelScope &s) {
        ImplicitLocOpBuilder &b = s.b;
        AmxGemmBuilder g(s, n, k);
        g.header({1, 2});
        Value c1 = g.constants[0], c2 = g.constants[1];
        Value tail = arith::RemUIOp::create(b, g.rows, g.c32);
        Value rows2 = arith::SubIOp::create(b, g.rows, tail);
        Value kdim = s.index(k), kblocks = s.index(k / 32), npairs = s.index(n / 32);
        auto [begin, end] = g.columns(npairs);
        auto pairs = scf::ForOp::create(b, begin, end, c1);
        b.setInsertionPointToStart(pairs.getBody());
        Value np = pairs.getInductionVar();
        Value nt = arith::MulIOp::create(b, np, c2);
        Value n0 = arith::MulIOp::create(b, nt, g.c16);
        Value n1 = arith::AddIOp::create(b, n0, g.c16);
        Value first0 = arith::MulIOp::create(b, nt, kblocks);
        Value first1 = arith::AddIOp::create(b, first0, kblocks);
        // The B tiles of k step kk for both column tiles.
        auto bRows = [&](Value kk) {
          Value kb = arith::DivUIOp::create(b, kk, g.c32);
          Value blk0 = arith::AddIOp::create(b, first0, kb);
          Value blk1 = arith::AddIOp::create(b, first1, kb);
          Value brow0 = arith::MulIOp::create(b, blk0, g.c16);
          Value brow1 = arith::MulIOp::create(b, blk1, g.c16);
          return std::pair{brow0, brow1};
        };
        {
          // Two row tiles at a time.
          OpBuilder::InsertionGuard guard(b);
          auto rowsLoop = scf::ForOp::create(b, g.c0, rows2, g.c32);
          b.setInsertionPointToStart(rowsLoop.getBody());
          Value m = rowsLoop.getInductionVar();
          Value m1 = arith::AddIOp::create(b, m, g.c16);
          Value z = amx::TileZeroOp::create(b, g.accType);
          auto kLoop = scf::ForOp::create(b, g.c0, kdim, g.c32, ValueRange{z, z, z, z});
          {
            OpBuilder::InsertionGuard inner(b);
            b.setInsertionPointToStart(kLoop.getBody());
            Value kk = kLoop.getInductionVar();
            auto [brow0, brow1] = bRows(kk);
            Value a0 = g.loadA(m, kk);
            Value a1 = g.loadA(m1, kk);
            Value b0 = g.loadB(brow0);
            Value b1 = g.loadB(brow1);
            ValueRange acc = kLoop.getRegionIterArgs();
            Value t00 = g.mul(a0, b0, acc[0]);
            Value t01 = g.mul(a0, b1, acc[1]);
            Value t10 = g.mul(a1, b0, acc[2]);
            Value t11 = g.mul(a1, b1, acc[3]);
            scf::YieldOp::create(b, ValueRange{t00, t01, t10, t11});
          }
          g.store(m, n0, kLoop.getResult(0));
          g.store(m, n1, kLoop.getResult(1));
          g.store(m1, n0, kLoop.getResult(2));
          g.store(m1, n1, kLoop.getResult(3));
        }
        // The last row tile of an odd count.
        auto rowsLoop = scf::ForOp::create(b, rows2, g.rows, g.c16);
        b.setInsertionPointToStart(rowsLoop.getBody());
        Value m = rowsLoop.getInductionVar();
        Value z = amx::TileZeroOp::create(b, g.accType);
        auto kLoop = scf::ForOp::create(b, g.c0, kdim, g.c32, ValueRange{z, z});
        {
          OpBuilder::InsertionGuard inner(b);
          b.setInsertionPointToStart(kLoop.getBody());
          Value kk = kLoop.getInductionVar();
          auto [brow0, brow1] = bRows(kk);
          Value a0 = g.loadA(m, kk);
          Value b0 = g.loadB(brow0);
          Value b1 = g.loadB(brow1);
          ValueRange acc = kLoop.getRegionIterArgs();
          Value t0 = g.mul(a0, b0, acc[0]);
          Value t1 = g.mul(a0, b1, acc[1]);
          scf::YieldOp::create(b, ValueRange{t0, t1});
        }
        g.store(m, n0, kLoop.getResult(0));
        g.store(m, n1, kLoop.getResult(1));
      });
}

} // namespace kiln::x86
