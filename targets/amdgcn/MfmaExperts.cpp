#include "targets/amdgcn/MfmaExperts.h"

#include "targets/amdgcn/MfmaGemm.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace kiln::amdgcn {

using namespace mlir;
using kernels::ExpertTileShape;

namespace {

constexpr int64_t kTile = 32, kWaves = 4, kThreads = 64 * kWaves;

enum class Product { GateUp, Down };

// NVFP4's decoding constants: codes placed into f16 bits (code x 2^-14),
// scales too (scale x 2^-8), their product times 2^22.
struct Nvfp4Constants {
  Value nibMask, nibShift, codeSign, codeSignShift, codeMag, codeMagShift, scaleSign,
      scaleSignShift, scaleMag, scaleMagShift, fold;
};

Nvfp4Constants nvfp4Constants(ImplicitLocOpBuilder &b) {
  Type i16 = b.getI16Type();
  auto splat = [&](int64_t lanes, int64_t v) {
    auto type = VectorType::get({lanes}, i16);
    return arith::ConstantOp::create(b, DenseElementsAttr::get(type, b.getIntegerAttr(i16, v)))
        .getResult();
  };
  auto c16 = [&](int64_t v) { return arith::ConstantIntOp::create(b, i16, v).getResult(); };
  Nvfp4Constants c;
  c.nibMask = splat(2, 15);
  c.nibShift = splat(2, 4);
  c.codeSign = splat(4, 8);
  c.codeSignShift = splat(4, 12);
  c.codeMag = splat(4, 7);
  c.codeMagShift = splat(4, 9);
  c.scaleSign = c16(128);
  c.scaleSignShift = c16(8);
  c.scaleMag = c16(127);
  c.scaleMagShift = c16(7);
  c.fold = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(4194304.0f));
  return c;
}

// A tile kernel's lane: from the lists, its block's tile of 128 items of
// expert `e` and column tile; its wave's 32 items from `w0`; its item (token
// `t`, choice `j`) and output column `col`. build() leaves the builder
// inside the checks that the tile and the wave hold items.
class TileLane {
public:
  TileLane(kernels::KernelScope &k, const ExpertTileShape &s, Product p)
      : k(k), b(k.b), s(s), p(p) {}

  void build(int64_t colTiles) {
    if (s.nvfp4)
      nv = nvfp4Constants(b);
    c0 = k.index(0);
    c1 = k.index(1);
    c2 = k.index(2);
    Value c4 = k.index(4);
    c8 = k.index(8);
    c16 = k.index(16);
    Value c32 = k.index(32), c64 = k.index(64), c128 = k.index(kernels::kExpertTileRows);
    ck = k.index(s.k);
    zeroI32 = arith::ConstantIntOp::create(b, b.getI32Type(), 0);
    zeroAcc = arith::ConstantOp::create(
        b, DenseElementsAttr::get(VectorType::get({16}, b.getF32Type()), 0.0f));
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value bid = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    Value wave = arith::DivUIOp::create(b, tid, c64);
    Value lane = arith::RemUIOp::create(b, tid, c64);
    Value l32 = arith::RemUIOp::create(b, lane, c32);
    half4 = arith::MulIOp::create(b, arith::DivUIOp::create(b, lane, c32), c4);
    // The block's tile and column tile; the tile count in meta[E + 1].
    Value tiles = k.index(colTiles), countAt = k.index(s.experts + 1);
    Value tile = arith::DivUIOp::create(b, bid, tiles);
    Value nt = arith::RemUIOp::create(b, bid, tiles);
    Value count = loadIndex(k.arg(1), countAt);
    ifThen(arith::CmpIOp::create(b, arith::CmpIPredicate::ult, tile, count));
    Value at = arith::MulIOp::create(b, tile, c2);
    Value at1 = arith::AddIOp::create(b, at, c1);
    Value eI = memref::LoadOp::create(b, k.arg(2), ValueRange{at});
    Value r0I = memref::LoadOp::create(b, k.arg(2), ValueRange{at1});
    e = arith::IndexCastOp::create(b, b.getIndexType(), eI);
    Value r0 = arith::IndexCastOp::create(b, b.getIndexType(), r0I);
    Value e1 = arith::AddIOp::create(b, e, c1);
    Value firstI = memref::LoadOp::create(b, k.arg(1), ValueRange{e});
    Value endI = memref::LoadOp::create(b, k.arg(1), ValueRange{e1});
    Value first = arith::IndexCastOp::create(b, b.getIndexType(), firstI);
    Value end = arith::IndexCastOp::create(b, b.getIndexType(), endI);
    base = arith::AddIOp::create(b, first, r0);
    rowsIn = arith::MinUIOp::create(b, arith::SubIOp::create(b, end, base), c128);
    Value lastIn = arith::SubIOp::create(b, rowsIn, c1);
    w0 = arith::MulIOp::create(b, wave, c32);
    ifThen(arith::CmpIOp::create(b, arith::CmpIPredicate::ult, w0, rowsIn));
    Value lrow = arith::MinUIOp::create(b, arith::AddIOp::create(b, w0, l32), lastIn);
    Item it = item(arith::AddIOp::create(b, base, lrow));
    t = it.token;
    j = it.choice;
    col = arith::AddIOp::create(b, arith::MulIOp::create(b, nt, c32), l32);
  }

  // The global scale of weight matrix `m` (1 for bf16 weights).
  Value globalScale(int64_t m) {
    if (!s.nvfp4)
      return arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f));
    return memref::LoadOp::create(b, k.arg(weightArg(m) + 2), ValueRange{e});
  }

  // The lane's B operand of weight matrix `m` at k `kk`: 4 weights of row
  // `col` of expert `e` as vector<4xi16>.
  Value weightOperand(int64_t m, Value kk) {
    Type i16 = b.getI16Type();
    auto i16x4 = VectorType::get({4}, i16);
    Value w = k.arg(weightArg(m));
    if (!s.nvfp4) {
      Value v = vector::LoadOp::create(b, VectorType::get({4}, b.getBF16Type()), w,
                                       ValueRange{e, col, kk}, false, llvm::MaybeAlign(8));
      return vector::BitCastOp::create(b, i16x4, v);
    }
    Value kb = arith::DivUIOp::create(b, kk, c2);
    Value codes = vector::LoadOp::create(b, VectorType::get({2}, b.getI8Type()), w,
                                         ValueRange{e, col, kb}, false, llvm::MaybeAlign(2));
    Value blk = arith::DivUIOp::create(b, kk, c16);
    Value sc = memref::LoadOp::create(b, k.arg(weightArg(m) + 1), ValueRange{e, col, blk});
    Value wide = arith::ExtUIOp::create(b, VectorType::get({2}, i16), codes);
    Value lo = arith::AndIOp::create(b, wide, nv.nibMask);
    Value hi = arith::ShRUIOp::create(b, wide, nv.nibShift);
    Value all = vector::ShuffleOp::create(b, lo, hi, ArrayRef<int64_t>{0, 2, 1, 3});
    Value signs =
        arith::ShLIOp::create(b, arith::AndIOp::create(b, all, nv.codeSign), nv.codeSignShift);
    Value mags =
        arith::ShLIOp::create(b, arith::AndIOp::create(b, all, nv.codeMag), nv.codeMagShift);
    Value bits = arith::OrIOp::create(b, signs, mags);
    Value vals = arith::ExtFOp::create(
        b, VectorType::get({4}, b.getF32Type()),
        arith::BitcastOp::create(b, VectorType::get({4}, b.getF16Type()), bits).getResult());
    Value s16 = arith::ExtUIOp::create(b, i16, sc);
    Value ssign =
        arith::ShLIOp::create(b, arith::AndIOp::create(b, s16, nv.scaleSign), nv.scaleSignShift);
    Value smag =
        arith::ShLIOp::create(b, arith::AndIOp::create(b, s16, nv.scaleMag), nv.scaleMagShift);
    Value sbits = arith::OrIOp::create(b, ssign, smag);
    Value sf = arith::ExtFOp::create(
        b, b.getF32Type(), arith::BitcastOp::create(b, b.getF16Type(), sbits).getResult());
    Value folded = arith::MulFOp::create(b, sf, nv.fold);
    Value sv = vector::BroadcastOp::create(b, VectorType::get({4}, b.getF32Type()), folded);
    Value wv = arith::MulFOp::create(b, vals, sv);
    Value wb = arith::TruncFOp::create(b, VectorType::get({4}, b.getBF16Type()), wv);
    return vector::BitCastOp::create(b, i16x4, wb);
  }

  // For each of the lane's 16 results (row 8 (r / 4) + 4 (lane / 32) + r %
  // 4 of the wave's 32) whose row holds an item: `store(r, item)`.
  struct Item {
    Value token, choice;
  };
  void forEachResult(function_ref<void(int64_t, const Item &)> store) {
    for (int64_t r = 0; r < 16; ++r) {
      Value off = k.index(8 * (r / 4) + r % 4);
      Value row = arith::AddIOp::create(b, w0, arith::AddIOp::create(b, half4, off));
      auto ifRow = scf::IfOp::create(
          b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, rowsIn), false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifRow.getThenRegion().front());
      store(r, item(arith::AddIOp::create(b, base, row)));
    }
  }

  kernels::KernelScope &k;
  ImplicitLocOpBuilder &b;
  const ExpertTileShape &s;
  Product p;
  Nvfp4Constants nv{};
  Value c0, c1, c2, c8, c16, ck, zeroI32, zeroAcc, half4, e, base, rowsIn, w0, t, j, col;

private:
  unsigned weightArg(int64_t m) const { return 4 + m * kernels::projectionArgCount(s); }
  Value loadIndex(Value ref, Value at) {
    Value v = memref::LoadOp::create(b, ref, ValueRange{at});
    return arith::IndexCastOp::create(b, b.getIndexType(), v);
  }
  Item item(Value position) {
    Value id = loadIndex(k.arg(3), position);
    return {arith::DivUIOp::create(b, id, ck), arith::RemUIOp::create(b, id, ck)};
  }
  void ifThen(Value condition) {
    auto ifOp = scf::IfOp::create(b, condition, /*withElse=*/false);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
  }
};

std::vector<Type> tileArgs(Builder &b, const ExpertTileShape &s, Product p) {
  const int64_t dynamic = ShapedType::kDynamic;
  Type f32 = b.getF32Type();
  const int64_t in = p == Product::GateUp ? s.latent : s.intermediate;
  const int64_t out = p == Product::GateUp ? s.intermediate : s.latent;
  std::vector<Type> types = {p == Product::GateUp ? Type(MemRefType::get({dynamic, in}, f32))
                                                  : Type(MemRefType::get({dynamic, s.k, in}, f32))};
  kernels::appendExpertListTypes(b, s, types);
  for (int64_t m = 0; m < (p == Product::GateUp ? 2 : 1); ++m)
    kernels::appendProjectionTypes(b, s, out, in, types);
  types.push_back(MemRefType::get({dynamic, s.k, out}, f32));
  return types;
}

kernels::Tiling tileTiling() {
  kernels::Tiling tiling;
  tiling.set("kind", "mfma-experts")
      .set("tile", std::vector<int64_t>{kernels::kExpertTileRows, kTile, 8})
      .set("block", kThreads);
  return tiling;
}

} // namespace

bool mfmaExpertsFit(const ExpertTileShape &s) {
  return s.maxTokens > 1 && s.intermediate % kTile == 0 && s.latent % kTile == 0 &&
         s.intermediate % 16 == 0 && s.latent % 16 == 0 && kernels::expertListsFit(s);
}

kernels::Work mfmaExpertGateUpWork(const ExpertTileShape &s) {
  return kernels::Work{s.maxTiles() * (s.intermediate / kTile) * kThreads, 0, kThreads};
}
kernels::Work mfmaExpertDownWork(const ExpertTileShape &s) {
  return kernels::Work{s.maxTiles() * (s.latent / kTile) * kThreads, 0, kThreads};
}

// Built as typed IR (KernelBuilder.h).
kernels::KernelSpec mfmaExpertGateUp(const ExpertTileShape &s) {
  auto args = [&](Builder &b) { return tileArgs(b, s, Product::GateUp); };
  return kernels::buildKernel(
      "expert_gateup_mfma_" + kernels::expertShapeSuffix(s), "kiln.megamoe", tileTiling(), args,
      [&](kernels::KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        TileLane lane(k, s, Product::GateUp);
        lane.build(s.intermediate / kTile);
        Value gateScale = lane.globalScale(0);
        Value upScale = lane.globalScale(1);
        Value one = arith::ConstantFloatOp::create(b, b.getF32Type(), APFloat(1.0f));
        Value kdim = k.index(s.latent);
        auto loop =
            scf::ForOp::create(b, lane.c0, kdim, lane.c8, ValueRange{lane.zeroAcc, lane.zeroAcc});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          Value kk = arith::AddIOp::create(b, loop.getInductionVar(), lane.half4);
          MfmaActivation a = mfmaActivation(b, k.arg(0), ValueRange{lane.t, kk});
          Value gateB = lane.weightOperand(0, kk);
          Value upB = lane.weightOperand(1, kk);
          ValueRange acc = loop.getRegionIterArgs();
          Value g1 = mfmaStep(b, a.hi, gateB, acc[0], lane.zeroI32);
          Value g2 = mfmaStep(b, a.lo, gateB, g1, lane.zeroI32);
          Value u1 = mfmaStep(b, a.hi, upB, acc[1], lane.zeroI32);
          Value u2 = mfmaStep(b, a.lo, upB, u1, lane.zeroI32);
          scf::YieldOp::create(b, ValueRange{g2, u2});
        }
        lane.forEachResult([&](int64_t r, const TileLane::Item &it) {
          Value gRaw = vector::ExtractOp::create(b, loop.getResult(0), ArrayRef<int64_t>{r});
          Value uRaw = vector::ExtractOp::create(b, loop.getResult(1), ArrayRef<int64_t>{r});
          Value g = arith::MulFOp::create(b, gRaw, gateScale);
          Value u = arith::MulFOp::create(b, uRaw, upScale);
          Value h = kernels::swiGlu(b, g, u, one);
          memref::StoreOp::create(b, h, k.arg(lane.s.nvfp4 ? 10 : 6),
                                  ValueRange{it.token, it.choice, lane.col});
        });
      });
}

kernels::KernelSpec mfmaExpertDown(const ExpertTileShape &s) {
  auto args = [&](Builder &b) { return tileArgs(b, s, Product::Down); };
  return kernels::buildKernel(
      "expert_down_mfma_" + kernels::expertShapeSuffix(s), "kiln.megamoe", tileTiling(), args,
      [&](kernels::KernelScope &k) {
        ImplicitLocOpBuilder &b = k.b;
        TileLane lane(k, s, Product::Down);
        lane.build(s.latent / kTile);
        Value scale = lane.globalScale(0);
        Value kdim = k.index(s.intermediate);
        auto loop = scf::ForOp::create(b, lane.c0, kdim, lane.c8, ValueRange{lane.zeroAcc});
        {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(loop.getBody());
          Value kk = arith::AddIOp::create(b, loop.getInductionVar(), lane.half4);
          MfmaActivation a = mfmaActivation(b, k.arg(0), ValueRange{lane.t, lane.j, kk});
          Value downB = lane.weightOperand(0, kk);
          Value d1 = mfmaStep(b, a.hi, downB, loop.getRegionIterArgs()[0], lane.zeroI32);
          scf::YieldOp::create(b, ValueRange{mfmaStep(b, a.lo, downB, d1, lane.zeroI32)});
        }
        lane.forEachResult([&](int64_t r, const TileLane::Item &it) {
          Value raw = vector::ExtractOp::create(b, loop.getResult(0), ArrayRef<int64_t>{r});
          Value d = arith::MulFOp::create(b, raw, scale);
          memref::StoreOp::create(b, d, k.arg(lane.s.nvfp4 ? 7 : 5),
                                  ValueRange{it.token, it.choice, lane.col});
        });
      });
}

} // namespace kiln::amdgcn
