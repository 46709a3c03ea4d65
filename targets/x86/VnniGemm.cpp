// Built as typed IR through MLIR's builders (not text): the tiling is one
// struct that the loops, the kiln.tiling attribute and the JSON all read.
#include "targets/x86/VnniGemm.h"

#include "targets/common/KernelBuilder.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/X86Vector/X86VectorDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <utility>
#include <vector>

namespace kiln::x86 {

using namespace mlir;

VnniGemmTiling vnniGemmTiling(bool bf16Dot, int vectorBits, int64_t n) {
  // Accumulators plus a block row per tile plus a broadcast pair (plus the
  // split halves for FMA) within the register file: 32 zmm hold 6 x 4 dot
  // accumulators or 6 x 2 FMA ones; 16 ymm hold 4 x 1 vector<16xf32>. A
  // single row takes 8 (or 4, or 2) tiles: measured on Zen 5, a row of 4
  // tiles streams W from L3 at 80% of the rate of 8.
  VnniGemmTiling tiling;
  tiling.bf16Dot = bf16Dot;
  int64_t maxTiles = 1, maxPanel = 2;
  if (vectorBits >= 512) {
    tiling.rows = 6;
    maxTiles = bf16Dot ? 4 : 2;
    maxPanel = bf16Dot ? 8 : 4;
  } else {
    tiling.rows = 4;
  }
  const int64_t columnTiles = n / 16;
  auto largestDivisor = [](int64_t of, int64_t atMost) {
    for (int64_t t = atMost; t > 1; --t)
      if (of % t == 0)
        return t;
    return int64_t(1);
  };
  tiling.panelTiles = largestDivisor(columnTiles, maxPanel);
  tiling.tiles = largestDivisor(tiling.panelTiles, maxTiles);
  return tiling;
}

namespace {

constexpr int64_t kTileColumns = 16; // f32 lanes of an accumulator
constexpr int64_t kBlockRow = 32;    // bf16 of one VNNI block row: 16 k pairs

// The kernel's builder and the values every part of it reads.
class VnniGemmBuilder {
public:
  VnniGemmBuilder(ImplicitLocOpBuilder &b, const VnniGemmTiling &tiling, int64_t k)
      : b(b), tiling(tiling), pairs(k / 2), f32(b.getF32Type()), bf16(b.getBF16Type()),
        i32(b.getI32Type()), acc(VectorType::get({kTileColumns}, f32)),
        row(VectorType::get({kBlockRow}, bf16)), wideInts(VectorType::get({kTileColumns}, i32)) {}

  Value index(int64_t v) { return arith::ConstantIndexOp::create(b, v); }

  // One register block: `rows` rows of a from row m by `tiles` tiles from
  // tile0, over all of k, stored to y.
  void block(int64_t rows, int64_t tiles, Value a, Value w, Value y, Value m, Value tile0) {
    Value zero = arith::ConstantOp::create(b, llvm::cast<TypedAttr>(b.getZeroAttr(acc)));
    std::vector<Value> rowIndex(rows), tileRow(tiles);
    for (int64_t r = 0; r < rows; ++r)
      rowIndex[r] = arith::AddIOp::create(b, m, index(r));
    // Tile t's k pairs are block rows tile * pairs .. + pairs - 1 of W.
    for (int64_t t = 0; t < tiles; ++t)
      tileRow[t] =
          arith::MulIOp::create(b, arith::AddIOp::create(b, tile0, index(t)), index(pairs));
    auto loop = scf::ForOp::create(b, index(0), index(pairs), index(1),
                                   SmallVector<Value>(rows * tiles, zero));
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      SmallVector<Value> next;
      step(rows, tiles, a, w, loop.getInductionVar(), rowIndex, tileRow, loop.getRegionIterArgs(),
           next);
      scf::YieldOp::create(b, next);
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < tiles; ++t) {
        Value column = arith::MulIOp::create(b, arith::AddIOp::create(b, tile0, index(t)),
                                             index(kTileColumns));
        vector::StoreOp::create(b, loop.getResult(r * tiles + t), y,
                                ValueRange{rowIndex[r], column});
      }
  }

  // The products of k pair kp into `sums` (rows x tiles), appended to `next`.
  void step(int64_t rows, int64_t tiles, Value a, Value w, Value kp, ArrayRef<Value> rowIndex,
            ArrayRef<Value> tileRow, ValueRange sums, SmallVector<Value> &next) {
    Value c0 = index(0);
    Value kk = arith::MulIOp::create(b, kp, index(2));
    std::vector<Value> wRow(tiles), even(tiles), odd(tiles);
    for (int64_t t = 0; t < tiles; ++t) {
      Value at = arith::AddIOp::create(b, tileRow[t], kp);
      wRow[t] = vector::LoadOp::create(b, row, w, ValueRange{at, c0});
      if (!tiling.bf16Dot)
        std::tie(even[t], odd[t]) = splitPairs(wRow[t]);
    }
    for (int64_t r = 0; r < rows; ++r) {
      // The bf16 pair a[row, kk..kk+1] as one i32, broadcast.
      Value pair =
          vector::LoadOp::create(b, VectorType::get({2}, bf16), a, ValueRange{rowIndex[r], kk});
      Value word = vector::ExtractOp::create(
          b, vector::BitCastOp::create(b, VectorType::get({1}, i32), pair), ArrayRef<int64_t>{0});
      if (tiling.bf16Dot) {
        Value both =
            vector::BitCastOp::create(b, row, vector::BroadcastOp::create(b, wideInts, word));
        for (int64_t t = 0; t < tiles; ++t)
          next.push_back(x86vector::DotBF16Op::create(b, acc, sums[r * tiles + t], both, wRow[t]));
      } else {
        Value x0 = vector::BroadcastOp::create(b, acc, lowHalf(word));
        Value x1 = vector::BroadcastOp::create(b, acc, highHalf(word));
        for (int64_t t = 0; t < tiles; ++t) {
          Value sum = vector::FMAOp::create(b, acc, even[t], x0, sums[r * tiles + t]);
          next.push_back(vector::FMAOp::create(b, acc, odd[t], x1, sum));
        }
      }
    }
  }

private:
  // bf16 to f32 is a 16-bit shift: the low half of each 32-bit pair moves
  // up, the high half is masked in place.
  Value lowHalf(Value word) {
    Value shifted = arith::ShLIOp::create(b, word, constantI32(word, 16));
    return arith::BitcastOp::create(b, floatLike(word), shifted);
  }
  Value highHalf(Value word) {
    Value masked = arith::AndIOp::create(b, word, constantI32(word, int32_t(0xFFFF0000u)));
    return arith::BitcastOp::create(b, floatLike(word), masked);
  }
  std::pair<Value, Value> splitPairs(Value blockRow) {
    Value words = vector::BitCastOp::create(b, wideInts, blockRow);
    return {lowHalf(words), highHalf(words)};
  }
  Type floatLike(Value ints) {
    if (auto vector = llvm::dyn_cast<VectorType>(ints.getType()))
      return VectorType::get(vector.getShape(), f32);
    return f32;
  }
  Value constantI32(Value like, int32_t value) {
    if (auto vector = llvm::dyn_cast<VectorType>(like.getType()))
      return arith::ConstantOp::create(
          b, DenseElementsAttr::get(vector, b.getI32IntegerAttr(value).getValue()));
    return arith::ConstantOp::create(b, b.getI32IntegerAttr(value));
  }

  ImplicitLocOpBuilder &b;
  const VnniGemmTiling &tiling;
  int64_t pairs;
  Type f32, bf16, i32;
  VectorType acc, row, wideInts;
};

} // namespace

kernels::KernelSpec linearVnni(const VnniGemmTiling &tiling, int64_t n, int64_t k) {
  const std::string name =
      std::string("linear_") + tiling.family() + "_" + std::to_string(n) + "x" + std::to_string(k);
  kernels::Tiling described;
  described.set("panel_tiles", tiling.panelTiles)
      .set("rows", tiling.rows)
      .set("tile_k", 2)
      .set("tile_n", kTileColumns)
      .set("tiles", tiling.tiles)
      .set("kind", tiling.family())
      .set("order", "n-m-k")
      .set("parallel", "n");
  auto args = [&](Builder &b) -> std::vector<Type> {
    const int64_t dynamic = ShapedType::kDynamic;
    return {MemRefType::get({dynamic, k}, b.getBF16Type()),
            MemRefType::get({dynamic, kBlockRow}, b.getBF16Type()),
            MemRefType::get({dynamic, n}, b.getF32Type()), b.getI64Type()};
  };
  return kernels::buildKernel(
      name, "kiln.linear", described, args, [&](kernels::KernelScope &kernel) {
        ImplicitLocOpBuilder &b = kernel.b;
        VnniGemmBuilder gemm(b, tiling, k);
        Value aArg = kernel.arg(0), wArg = kernel.arg(1), yArg = kernel.arg(2);
        Value rows = kernel.argIndex(3);
        auto [begin, end] = kernels::partRange(b, gemm.index(tiling.panels(n)), kernel.argIndex(4),
                                               kernel.argIndex(5));
        // Whole register blocks of rows, then the rest one row at a time.
        Value blockRows = gemm.index(tiling.rows);
        Value mainRows = arith::SubIOp::create(b, rows, arith::RemUIOp::create(b, rows, blockRows));
        auto panels = scf::ForOp::create(b, begin, end, gemm.index(1));
        b.setInsertionPointToStart(panels.getBody());
        Value tile0 =
            arith::MulIOp::create(b, panels.getInductionVar(), gemm.index(tiling.panelTiles));
        auto whole = scf::ForOp::create(b, gemm.index(0), mainRows, blockRows);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(whole.getBody());
          for (int64_t t = 0; t < tiling.panelTiles; t += tiling.tiles)
            gemm.block(tiling.rows, tiling.tiles, aArg, wArg, yArg, whole.getInductionVar(),
                       arith::AddIOp::create(b, tile0, gemm.index(t)));
        }
        auto rest = scf::ForOp::create(b, mainRows, rows, gemm.index(1));
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(rest.getBody());
          gemm.block(1, tiling.panelTiles, aArg, wArg, yArg, rest.getInductionVar(), tile0);
        }
      });
}

} // namespace kiln::x86
