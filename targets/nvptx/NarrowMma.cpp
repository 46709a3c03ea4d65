#include "targets/nvptx/NarrowMma.h"

#include "targets/common/KernelBuilder.h"
#include "targets/nvptx/MmaSync.h"
#include "targets/nvptx/Nvfp4Bf16.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <algorithm>

namespace kiln::nvptx::narrow {

using namespace mlir;

int64_t blocksPerChunk(int64_t in, bool nvfp4) {
  int64_t span = nvfp4 ? 4 : 1;
  while (span > 1 && in % (kChunk * span) != 0)
    span /= 2;
  return span;
}

int64_t chunkColumns(int64_t in, bool nvfp4) { return kChunk * blocksPerChunk(in, nvfp4); }

int64_t chunksPerStep(int64_t in, bool nvfp4) {
  int64_t chunks = in / chunkColumns(in, nvfp4);
  int64_t per = nvfp4 ? 4 / blocksPerChunk(in, nvfp4) : 2;
  while (per > 1 && chunks % per != 0)
    per /= 2;
  return per;
}

namespace {

class KLoop {
public:
  KLoop(kernels::KernelScope &k, const Operands &ops, int64_t sources)
      : k(k), b(k.b), ops(ops), sources(sources), perStep(chunksPerStep(ops.in, ops.nvfp4)),
        span(blocksPerChunk(ops.in, ops.nvfp4)), i32(b.getI32Type()), f32(b.getF32Type()) {}

  SmallVector<Value> build() {
    const int64_t sums = 8 * sources;
    Value zero = arith::ConstantFloatOp::create(b, f32, APFloat(0.0f));
    SmallVector<Value> init(sums, zero);
    SmallVector<Value> first = loadStep(k.index(0));
    const size_t rawCount = first.size();
    init.append(first);
    auto loop = scf::ForOp::create(b, k.index(0), k.index(ops.steps), k.index(1), init);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(loop.getBody());
    Value step = loop.getInductionVar();
    Value next = arith::MinUIOp::create(b, arith::AddIOp::create(b, step, k.index(1)),
                                        k.index(std::max<int64_t>(ops.steps - 1, 0)));
    SmallVector<Value> ahead = loadStep(next);
    ValueRange carried = loop.getRegionIterArgs();
    SmallVector<Value> c(carried.begin(), carried.begin() + sums);
    const size_t perChunk = rawCount / perStep, perRow = perChunk / kRows;
    for (int64_t u = 0; u < perStep; ++u) {
      Value chunk =
          arith::AddIOp::create(b, arith::MulIOp::create(b, step, k.index(perStep)), k.index(u));
      for (int64_t block = 0; block < span; ++block) {
        // Each row's 16 weights of the block as eight bf16 pairs.
        SmallVector<SmallVector<Value>> w;
        for (int64_t r = 0; r < kRows; ++r) {
          size_t at = sums + u * perChunk + r * perRow;
          Value words = ops.nvfp4 ? decodeBlock(carried[at], carried[at + 1], block) : carried[at];
          SmallVector<Value> pairs;
          for (int64_t i = 0; i < 8; ++i)
            pairs.push_back(vector::ExtractOp::create(b, words, ArrayRef<int64_t>{i}));
          w.push_back(pairs);
        }
        for (int64_t s = 0; s < sources; ++s) {
          auto [hi, lo] = activations(s, chunk, block);
          for (int64_t step16 = 0; step16 < 4; ++step16) {
            int64_t e = 2 * step16, o = 2 * step16 + 1;
            SmallVector<Value> bHi = {hi[e], hi[o]}, bLo = {lo[e], lo[o]};
            for (int64_t tile = 0; tile < 2; ++tile) {
              const auto &ra = w[2 * tile], &rb = w[2 * tile + 1];
              SmallVector<Value> a = {ra[e], rb[e], ra[o], rb[o]};
              MutableArrayRef<Value> cTile(c.data() + 8 * s + 4 * tile, 4);
              accumulate(cTile, a, bHi);
              accumulate(cTile, a, bLo);
            }
          }
        }
      }
    }
    SmallVector<Value> yield = c;
    yield.append(ahead);
    scf::YieldOp::create(b, yield);
    return SmallVector<Value>(loop.getResults().begin(), loop.getResults().begin() + sums);
  }

private:
  // This thread's raw weights of k step `step`, chunk by chunk, row by row.
  SmallVector<Value> loadStep(Value step) {
    SmallVector<Value> raw;
    Value chunk0 = arith::MulIOp::create(b, step, k.index(perStep));
    for (int64_t u = 0; u < perStep; ++u) {
      Value chunk = arith::AddIOp::create(b, chunk0, k.index(u));
      for (int64_t r = 0; r < kRows; ++r)
        ops.loadRow(r, chunk, raw);
    }
    return raw;
  }

  // Block `block` of a row's raw NVFP4 values in a chunk (codes, scales) as
  // eight bf16 pairs (vector<8xi32>).
  Value decodeBlock(Value codes, Value scales, int64_t block) {
    if (span == 1)
      return nvfp4BlockToBf16(b, codes, scales);
    Value words = vector::ExtractStridedSliceOp::create(b, codes, ArrayRef<int64_t>{2 * block},
                                                        ArrayRef<int64_t>{2}, ArrayRef<int64_t>{1});
    Value scale = vector::ExtractOp::create(b, scales, ArrayRef<int64_t>{block});
    return nvfp4BlockToBf16(b, words, scale);
  }

  // Source s's 16 activations of block `block` of `chunk` for this thread,
  // as bf16 pairs of their rounded values (hi) and of what rounding left
  // (lo).
  std::pair<SmallVector<Value>, SmallVector<Value>> activations(int64_t s, Value chunk,
                                                                int64_t block) {
    Value col0 = arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, k.index(kChunk * span)),
                                       arith::MulIOp::create(b, ops.t, k.index(16 * span)));
    if (block > 0)
      col0 = arith::AddIOp::create(b, col0, k.index(16 * block));
    auto f32x4 = VectorType::get({4}, f32);
    auto bf16x4 = VectorType::get({4}, b.getBF16Type());
    auto i32x2 = VectorType::get({2}, i32);
    SmallVector<Value> hi, lo;
    for (int64_t q = 0; q < 4; ++q) {
      Value x = ops.loadX(s, arith::AddIOp::create(b, col0, k.index(4 * q)));
      Value h = arith::TruncFOp::create(b, bf16x4, x);
      Value rest = arith::SubFOp::create(b, x, arith::ExtFOp::create(b, f32x4, h));
      Value l = arith::TruncFOp::create(b, bf16x4, rest);
      Value hw = vector::BitCastOp::create(b, i32x2, h);
      Value lw = vector::BitCastOp::create(b, i32x2, l);
      for (int64_t w = 0; w < 2; ++w) {
        hi.push_back(vector::ExtractOp::create(b, hw, ArrayRef<int64_t>{w}));
        lo.push_back(vector::ExtractOp::create(b, lw, ArrayRef<int64_t>{w}));
      }
    }
    return {hi, lo};
  }

  // c += A B over one k16 step.
  void accumulate(MutableArrayRef<Value> c, ArrayRef<Value> a, ArrayRef<Value> bFrag) {
    SmallVector<Value, 4> sum = mmaBf16(b, a, bFrag, c);
    std::copy(sum.begin(), sum.end(), c.begin());
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const Operands &ops;
  int64_t sources, perStep, span;
  Type i32;
  FloatType f32;
};

} // namespace

SmallVector<Value> products(kernels::KernelScope &k, const Operands &ops, int64_t sources) {
  return KLoop(k, ops, sources).build();
}

} // namespace kiln::nvptx::narrow
