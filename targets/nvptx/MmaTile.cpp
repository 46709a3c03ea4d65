// Built as typed IR (KernelBuilder.h).
#include "targets/nvptx/MmaTile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::nvptx {

using namespace mlir;

namespace {

// Words (bf16 pairs) a shared-memory tile row holds: the k step's 16 words
// and 4 of padding, which puts the 8 rows a fragment load touches on
// distinct banks.
constexpr int64_t kRowWords = kMmaTileK / 2 + 4;
// The warp grid of a block: 2 x 4 warps, each 64 x 32 of the tile, which is
// 4 x 4 mma tiles of 16 x 8.
constexpr int64_t kSubM = 4, kSubN = 4;

class MmaTileBuilder {
public:
  MmaTileBuilder(MmaTileScope &s, Type acc) : s(s), b(s.b), acc(acc) {}

  // The staged registers (f32 activations, bf16 weights) into the shared
  // tiles: activations as a bf16 high part (sa) and remainder (sl).
  void stageStores(ValueRange a, ValueRange w) {
    auto v4bf = VectorType::get({4}, b.getBF16Type()), v4f = VectorType::get({4}, b.getF32Type());
    auto v2i = VectorType::get({2}, b.getI32Type()), v4i = VectorType::get({4}, b.getI32Type());
    for (int64_t i = 0; i < 4; ++i) {
      Value high = arith::TruncFOp::create(b, v4bf, a[i]);
      Value rest = arith::SubFOp::create(b, a[i], arith::ExtFOp::create(b, v4f, high));
      Value low = arith::TruncFOp::create(b, v4bf, rest);
      Value highWords = vector::BitCastOp::create(b, v2i, high);
      Value lowWords = vector::BitCastOp::create(b, v2i, low);
      vector::StoreOp::create(b, highWords, sa, ValueRange{s.lrow, wa[i]}, false,
                              llvm::MaybeAlign(8));
      vector::StoreOp::create(b, lowWords, sl, ValueRange{s.lrow, wa[i]}, false,
                              llvm::MaybeAlign(8));
    }
    for (int64_t i = 0; i < 2; ++i) {
      Value words = vector::BitCastOp::create(b, v4i, w[i]);
      vector::StoreOp::create(b, words, sb, ValueRange{s.lrow, wb[i]}, false, llvm::MaybeAlign(16));
    }
  }

  // A whole k step: for each k16 slice, the B fragments, then the high and
  // the remainder passes.
  SmallVector<Value> step(ValueRange in) {
    SmallVector<Value> accs(in.begin(), in.end());
    for (int64_t kk = 0; kk < 2; ++kk) {
      Value lo = fc[2 * kk], hi = fc[2 * kk + 1];
      Value fb[kSubN][2];
      for (int64_t j = 0; j < kSubN; ++j) {
        fb[j][0] = memref::LoadOp::create(b, sb, ValueRange{s.rb[j], lo});
        fb[j][1] = memref::LoadOp::create(b, sb, ValueRange{s.rb[j], hi});
      }
      accs = pass(sa, lo, hi, fb, accs);
      accs = pass(sl, lo, hi, fb, accs);
    }
    return accs;
  }

  // The 16 mma of one k16 slice (words lo and hi of the rows) of activation
  // tile `tile` with the B fragments `fb`.
  SmallVector<Value> pass(Value tile, Value lo, Value hi, Value (&fb)[kSubN][2], ValueRange in) {
    Value fa[kSubM][4];
    for (int64_t i = 0; i < kSubM; ++i) {
      fa[i][0] = memref::LoadOp::create(b, tile, ValueRange{s.ra[i], lo});
      fa[i][1] = memref::LoadOp::create(b, tile, ValueRange{s.ra8[i], lo});
      fa[i][2] = memref::LoadOp::create(b, tile, ValueRange{s.ra[i], hi});
      fa[i][3] = memref::LoadOp::create(b, tile, ValueRange{s.ra8[i], hi});
    }
    SmallVector<Value> out;
    for (int64_t i = 0; i < kSubM; ++i)
      for (int64_t j = 0; j < kSubN; ++j) {
        SmallVector<Value> c;
        for (int64_t e = 0; e < 4; ++e)
          c.push_back(LLVM::ExtractValueOp::create(b, in[kSubN * i + j], ArrayRef<int64_t>{e}));
        out.push_back(NVVM::MmaOp::create(
            b, acc, ArrayRef<Value>(fa[i]), ValueRange{fb[j][0], fb[j][1]}, c,
            ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
            std::array<NVVM::MMATypes, 2>{NVVM::MMATypes::bf16, NVVM::MMATypes::bf16},
            std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col}));
      }
    return out;
  }

  MmaTileScope &s;
  ImplicitLocOpBuilder &b;
  Type acc;
  Value sa, sl, sb;
  Value wa[4], wb[2];
  Value fc[4]; // t + 0, 4, 8, 12: the words of a fragment
};

} // namespace

std::array<Value, 4> mmaActivationLoad(MmaTileScope &s, Value x, ValueRange rowIdx, Value at) {
  ImplicitLocOpBuilder &b = s.b;
  std::array<Value, 4> a;
  for (int64_t i = 0; i < 4; ++i) {
    Value in = arith::AddIOp::create(b, s.lk, arith::ConstantIndexOp::create(b, 4 * i));
    SmallVector<Value> idx(rowIdx.begin(), rowIdx.end());
    idx.push_back(arith::AddIOp::create(b, at, in));
    a[i] = vector::LoadOp::create(b, VectorType::get({4}, b.getF32Type()), x, idx, false,
                                  llvm::MaybeAlign(16));
  }
  return a;
}

kernels::KernelSpec buildMmaTileKernel(const MmaTileKernel &kernel) {
  return kernels::buildKernel(
      kernel.name, kernel.op, kernel.tiling, kernel.args, [&](kernels::KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        Type acc =
            LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(4, b.getF32Type()));
        const char *tileNames[3] = {"a", "l", "b"};
        kernels::SharedBuffer tiles[3];
        for (int i = 0; i < 3; ++i)
          tiles[i] = kernels::declareSharedBuffer(k, kernel.name + "_" + tileNames[i],
                                                  {kMmaTileM, kRowWords}, b.getI32Type());
        MmaTileScope s{k, b};
        s.c0 = k.index(0);
        s.c1 = k.index(1);
        s.c2 = k.index(2);
        s.c4 = k.index(4);
        s.c6 = k.index(6);
        s.c8 = k.index(8);
        s.c12 = k.index(12);
        s.c16 = k.index(16);
        s.c32 = k.index(32);
        s.c64 = k.index(64);
        s.c128 = k.index(128);
        Value kdim = k.index(kernel.k), kLast = k.index(kernel.k - kMmaTileK);
        s.tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
        s.bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
        Value live = kernel.setup(s);
        auto liveIf = scf::IfOp::create(b, live, /*withElseRegion=*/false);
        b.setInsertionPointToStart(&liveIf.getThenRegion().front());

        MmaTileBuilder t(s, acc);
        t.sa = tiles[0].get(b);
        t.sl = tiles[1].get(b);
        t.sb = tiles[2].get(b);
        s.warp = arith::DivUIOp::create(b, s.tid, s.c32);
        s.lane = arith::RemUIOp::create(b, s.tid, s.c32);
        Value wm = arith::DivUIOp::create(b, s.warp, s.c4);
        s.wn = arith::RemUIOp::create(b, s.warp, s.c4);
        s.g = arith::DivUIOp::create(b, s.lane, s.c4);
        s.t = arith::RemUIOp::create(b, s.lane, s.c4);
        // This thread stages half a k step of tile row lrow: activations and
        // weights.
        s.lrow = arith::DivUIOp::create(b, s.tid, s.c2);
        Value half = arith::RemUIOp::create(b, s.tid, s.c2);
        s.lk = arith::MulIOp::create(b, half, s.c16);
        Value word = arith::MulIOp::create(b, half, s.c8);
        Value waStep[4] = {s.c0, s.c2, s.c4, s.c6}, wbStep[2] = {s.c0, s.c4};
        for (int64_t i = 0; i < 4; ++i)
          t.wa[i] = arith::AddIOp::create(b, word, waStep[i]);
        for (int64_t i = 0; i < 2; ++i)
          t.wb[i] = arith::AddIOp::create(b, word, wbStep[i]);
        Value wrow = arith::MulIOp::create(b, wm, s.c64);
        Value wcol = arith::MulIOp::create(b, s.wn, s.c32);
        kernel.rows(s);
        for (int64_t i = 0; i < kSubM; ++i) {
          Value at = arith::AddIOp::create(b, wrow, k.index(i * 16));
          s.ra[i] = arith::AddIOp::create(b, at, s.g);
          s.ra8[i] = arith::AddIOp::create(b, s.ra[i], s.c8);
        }
        for (int64_t j = 0; j < kSubN; ++j) {
          s.rbWarp[j] = arith::AddIOp::create(b, wcol, k.index(j * 8));
          s.rb[j] = arith::AddIOp::create(b, s.rbWarp[j], s.g);
        }
        for (int64_t w = 0; w < 4; ++w)
          t.fc[w] = arith::AddIOp::create(b, s.t, k.index(4 * w));

        Value kBegin = kernel.kRange ? s.kBegin : s.c0;
        MmaStaged first = kernel.load(s, kBegin);
        auto [b0, b1] = kernel.finish(s, first);
        Value zero = LLVM::ZeroOp::create(b, acc);
        SmallVector<Value> init(kSubM * kSubN, zero);
        init.append(first.a.begin(), first.a.end());
        init.push_back(b0);
        init.push_back(b1);
        auto loop = scf::ForOp::create(b, kBegin, kernel.kRange ? s.kEnd : kdim, s.c32, init);
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          ValueRange carried = loop.getRegionIterArgs();
          t.stageStores(carried.slice(kSubM * kSubN, 4), carried.slice(kSubM * kSubN + 4, 2));
          gpu::BarrierOp::create(b);
          Value after = arith::AddIOp::create(b, loop.getInductionVar(), s.c32);
          Value next = arith::MinUIOp::create(b, after, kernel.kRange ? s.kFinal : kLast);
          MmaStaged staged = kernel.load(s, next);
          SmallVector<Value> yield = t.step(carried.take_front(kSubM * kSubN));
          auto [n0, n1] = kernel.finish(s, staged);
          gpu::BarrierOp::create(b);
          yield.append(staged.a.begin(), staged.a.end());
          yield.push_back(n0);
          yield.push_back(n1);
          scf::YieldOp::create(b, yield);
        }
        kernel.epilogue(s, loop.getResults().take_front(kSubM * kSubN));
      });
}

} // namespace kiln::nvptx
