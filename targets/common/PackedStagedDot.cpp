#include "targets/common/PackedStagedDot.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/ErrorHandling.h"

#include <array>

namespace kiln::kernels::warp {

using namespace mlir;

namespace {

constexpr int64_t kChunk = 1024;     // elements of a chunk (512 code bytes)
constexpr int64_t kWordsPerLane = 4; // a lane's 32 codes of a chunk
// E4M3 bytes of E2M1 codes hold 2^-6 of the codes' values.
constexpr float kCodeFold = 64.0f;

// The staged vector's elements for one word of codes: four f16 pairs
// (vector<2xf16>), in the order of the codes' pairs (0 2 | 4 6 | 1 3 | 5 7).
struct WordPairs {
  Value pairs[4];
};

class PackedDot {
public:
  PackedDot(ImplicitLocOpBuilder &b, Value staged, const kernels::E4m3PairToF16 &toF16)
      : b(b), staged(staged), toF16(toF16) {
    Type i32 = b.getI32Type();
    auto v4i = VectorType::get({4}, i32);
    auto splat = [&](int64_t v) -> Value {
      return arith::ConstantOp::create(b, v4i, DenseElementsAttr::get(v4i, b.getI32IntegerAttr(v)));
    };
    signs = splat(0x80808080);
    mags = splat(0x1C1C1C1C);
    two = splat(2);
    four = splat(4);
    half = arith::ConstantIntOp::create(b, i32, 16);
    auto h2 = VectorType::get({2}, b.getF16Type());
    zeroPair = arith::ConstantOp::create(b, h2, DenseElementsAttr::get(h2, b.getF16FloatAttr(0.0)));
  }

  // The lane's 32 staged elements of a chunk (at `xAt`, the element of word
  // 0; word m is 256 m on) as 4 words of 4 f16 pairs.
  std::array<WordPairs, kWordsPerLane> loadVector(Value xAt) {
    auto v8h = VectorType::get({8}, b.getF16Type());
    std::array<WordPairs, kWordsPerLane> out;
    for (int64_t m = 0; m < kWordsPerLane; ++m) {
      Value at =
          m ? arith::AddIOp::create(b, xAt, arith::ConstantIndexOp::create(b, 256 * m)).getResult()
            : xAt;
      Value eight =
          vector::LoadOp::create(b, v8h, staged, ValueRange{at}, false, llvm::MaybeAlign(16));
      for (int64_t p = 0; p < 4; ++p)
        out[m].pairs[p] =
            vector::ShuffleOp::create(b, eight, eight, ArrayRef<int64_t>{2 * p, 2 * p + 1});
    }
    return out;
  }

  // One row's chunk: its 16 code bytes at `codeAt` and 2 scales at
  // `scaleAt`, against the lane's staged elements `x`; `acc` (f32) updated.
  Value rowChunk(const Row &row, Value codeAt, Value scaleAt,
                 const std::array<WordPairs, kWordsPerLane> &x, Value acc) {
    Type i16 = b.getI16Type(), f32 = b.getF32Type();
    Value bytes = vector::LoadOp::create(b, VectorType::get({16}, b.getI8Type()), row.w,
                                         concat(row.at, codeAt), false, llvm::MaybeAlign(16));
    Value words = vector::BitCastOp::create(b, VectorType::get({4}, b.getI32Type()), bytes);
    // A byte's high code s e1 e0 m (bits 7..4) as s << 7 | e1 e0 m << 2, its
    // low code (bits 3..0) likewise: E4M3 bytes, each code's value / 64.
    Value high =
        arith::OrIOp::create(b, arith::AndIOp::create(b, words, signs),
                             arith::AndIOp::create(b, arith::ShRUIOp::create(b, words, two), mags));
    Value low = arith::OrIOp::create(
        b, arith::AndIOp::create(b, arith::ShLIOp::create(b, words, four), signs),
        arith::AndIOp::create(b, arith::ShLIOp::create(b, words, two), mags));
    Value scaleBytes = vector::LoadOp::create(b, VectorType::get({2}, b.getI8Type()), row.scales,
                                              concat(row.at, scaleAt), false, llvm::MaybeAlign(2));
    Value scalePair =
        toF16(b, vector::ExtractOp::create(
                     b, vector::BitCastOp::create(b, VectorType::get({1}, i16), scaleBytes),
                     ArrayRef<int64_t>{0}));
    for (int64_t block = 0; block < 2; ++block) {
      // Words 2 block and 2 block + 1 share the block's scale.
      Value sum = zeroPair;
      for (int64_t m = 2 * block; m < 2 * block + 2; ++m) {
        Value lo = vector::ExtractOp::create(b, low, ArrayRef<int64_t>{m});
        Value hi = vector::ExtractOp::create(b, high, ArrayRef<int64_t>{m});
        Value codes[4] = {lo, arith::ShRUIOp::create(b, lo, half), hi,
                          arith::ShRUIOp::create(b, hi, half)};
        for (int64_t p = 0; p < 4; ++p) {
          Value w = toF16(b, arith::TruncIOp::create(b, i16, codes[p]));
          sum = vector::FMAOp::create(b, w, x[m].pairs[p], sum);
        }
      }
      auto widen = [&](Value pair, int64_t i) -> Value {
        Value one = vector::ExtractOp::create(b, pair, ArrayRef<int64_t>{i});
        return arith::ExtFOp::create(b, f32, one);
      };
      Value both = arith::AddFOp::create(b, widen(sum, 0), widen(sum, 1));
      Value scale = widen(scalePair, block);
      acc = math::FmaOp::create(b, both, scale, acc);
    }
    return acc;
  }

private:
  ImplicitLocOpBuilder &b;
  Value staged;
  const kernels::E4m3PairToF16 &toF16;
  Value signs, mags, two, four, half, zeroPair;
};

} // namespace

void stageVectorInPairOrder(ImplicitLocOpBuilder &b, Value x, ValueRange xAt, int64_t k,
                            Value staged, Value thread, int64_t threads) {
  auto v8f = VectorType::get({8}, b.getF32Type());
  auto bound = [&](float v) -> Value {
    return arith::ConstantOp::create(b, v8f, DenseElementsAttr::get(v8f, v));
  };
  stageVectorByWords(b, x, xAt, k, staged, thread, threads, 8, [&](Value value) -> Value {
    // Saturated to f16's range, so that an element past it gives the
    // largest f16 of its sign rather than an infinity (and NaN sums).
    value = arith::MinimumFOp::create(b, arith::MaximumFOp::create(b, value, bound(-65504.0f)),
                                      bound(65504.0f));
    Value halves = arith::TruncFOp::create(b, VectorType::get({8}, b.getF16Type()), value);
    return vector::ShuffleOp::create(b, halves, halves, ArrayRef<int64_t>{0, 2, 4, 6, 1, 3, 5, 7});
  });
}

SmallVector<Value> packedStagedDot(ImplicitLocOpBuilder &b, const WarpOfPart &warp,
                                   ArrayRef<Row> rows, Value staged, int64_t k,
                                   const kernels::E4m3PairToF16 &toF16) {
  if (k % kChunk != 0 || k < 0)
    llvm::report_fatal_error("kiln: a packed staged dot needs whole 1024-element chunks");
  auto index = [&](int64_t v) { return arith::ConstantIndexOp::create(b, v).getResult(); };
  PackedDot dot(b, staged, toF16);
  const int64_t chunks = k / kChunk, perStep = chunks % 2 == 0 ? 2 : 1;
  // Lane l: code bytes 16 l on, scales 2 l on, staged elements 8 l on.
  Value codeLane = arith::MulIOp::create(b, warp.lane, index(16));
  Value scaleLane = arith::MulIOp::create(b, warp.lane, index(2));
  Value xLane = arith::MulIOp::create(b, warp.lane, index(8));
  Value zero = arith::ConstantOp::create(b, b.getF32FloatAttr(0.0f));
  SmallVector<Value> init(rows.size(), zero);
  auto loop = scf::ForOp::create(b, warp.c0, index(chunks / perStep), warp.c1, init);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    SmallVector<Value> acc(loop.getRegionIterArgs());
    for (int64_t i = 0; i < perStep; ++i) {
      Value chunk = arith::AddIOp::create(
          b, arith::MulIOp::create(b, loop.getInductionVar(), index(perStep)), index(i));
      auto at = [&](int64_t stride, Value lanePart) -> Value {
        return arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, index(stride)), lanePart);
      };
      Value codeAt = at(kChunk / 2, codeLane), scaleAt = at(kChunk / 16, scaleLane);
      std::array<WordPairs, kWordsPerLane> x = dot.loadVector(at(kChunk, xLane));
      for (auto [r, row] : llvm::enumerate(rows))
        acc[r] = dot.rowChunk(row, codeAt, scaleAt, x, acc[r]);
    }
    scf::YieldOp::create(b, acc);
  }
  Value fold = arith::ConstantOp::create(b, b.getF32FloatAttr(kCodeFold));
  SmallVector<Value> out;
  for (auto [r, row] : llvm::enumerate(rows))
    out.push_back(
        arith::MulFOp::create(b, loop.getResult(r), arith::MulFOp::create(b, row.global, fold)));
  return out;
}

} // namespace kiln::kernels::warp
