// Built as typed IR (KernelBuilder.h).
#include "targets/nvptx/MmaExperts.h"

#include "targets/common/SwiGlu.h"
#include "targets/nvptx/MmaTile.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include <memory>

namespace kiln::nvptx {

using namespace mlir;
using kernels::str;

namespace {

// gate/up: a tile's 128 weight rows are 64 columns of gate and the same 64
// of up, interleaved 16 and 16 so that each warp holds both for its columns.
constexpr int64_t kGateUpCols = kMmaTileN / 2;

// An expert projection among the kernel's arguments (ExpertLists.h).
kernels::ExpertProjection projection(kernels::KernelScope &k, unsigned first, bool nvfp4) {
  return kernels::expertProjection(k.func.getArguments(), first, nvfp4);
}

// The constants of the NVFP4 staging: E2M1 codes and their E4M3 scale
// placed into f16 bits (as in WarpDot.cpp); 2^22 undoes the placement.
struct Nvfp4Staging {
  Value nibMask, nibShift, codeSign, codeSignShift, codeMag, codeMagShift;
  Value scaleSign, scaleSignShift, scaleMag, scaleMagShift, fold;

  explicit Nvfp4Staging(ImplicitLocOpBuilder &b) {
    auto splat = [&](int64_t lanes, int64_t value) -> Value {
      auto type = VectorType::get({lanes}, b.getI16Type());
      return arith::ConstantOp::create(b, type,
                                       DenseElementsAttr::get(type, b.getI16IntegerAttr(value)));
    };
    auto i16 = [&](int64_t value) -> Value { return arith::ConstantIntOp::create(b, value, 16); };
    nibMask = splat(8, 15);
    nibShift = splat(8, 4);
    codeSign = splat(16, 8);
    codeSignShift = splat(16, 12);
    codeMag = splat(16, 7);
    codeMagShift = splat(16, 9);
    scaleSign = i16(128);
    scaleSignShift = i16(8);
    scaleMag = i16(127);
    scaleMagShift = i16(7);
    fold = arith::ConstantOp::create(b, b.getF32FloatAttr(4194304.0f));
  }

  // The 16 E2M1 codes (vector<8xi8>) times their E4M3 scale (i8), in bf16
  // (exact), as two vector<8xbf16>.
  std::pair<Value, Value> decode(ImplicitLocOpBuilder &b, Value codes, Value scale) const {
    auto v8i16 = VectorType::get({8}, b.getI16Type());
    auto v16f = VectorType::get({16}, b.getF32Type());
    Value wide = arith::ExtUIOp::create(b, v8i16, codes);
    Value lo = arith::AndIOp::create(b, wide, nibMask);
    Value hi = arith::ShRUIOp::create(b, wide, nibShift);
    Value all = vector::ShuffleOp::create(
        b, lo, hi, ArrayRef<int64_t>{0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15});
    Value sign = arith::ShLIOp::create(b, arith::AndIOp::create(b, all, codeSign), codeSignShift);
    Value mag = arith::ShLIOp::create(b, arith::AndIOp::create(b, all, codeMag), codeMagShift);
    Value bits = arith::OrIOp::create(b, sign, mag);
    Value half = arith::BitcastOp::create(b, VectorType::get({16}, b.getF16Type()), bits);
    Value vals = arith::ExtFOp::create(b, v16f, half);
    Value s16 = arith::ExtUIOp::create(b, b.getI16Type(), scale);
    Value ssign =
        arith::ShLIOp::create(b, arith::AndIOp::create(b, s16, scaleSign), scaleSignShift);
    Value smag = arith::ShLIOp::create(b, arith::AndIOp::create(b, s16, scaleMag), scaleMagShift);
    Value sbits = arith::OrIOp::create(b, ssign, smag);
    Value sh = arith::BitcastOp::create(b, b.getF16Type(), sbits);
    Value sf = arith::ExtFOp::create(b, b.getF32Type(), sh);
    Value sv = vector::BroadcastOp::create(b, v16f, arith::MulFOp::create(b, sf, fold));
    Value wb = arith::TruncFOp::create(b, VectorType::get({16}, b.getBF16Type()),
                                       arith::MulFOp::create(b, vals, sv));
    Value b0 = vector::ShuffleOp::create(b, wb, wb, ArrayRef<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
    Value b1 =
        vector::ShuffleOp::create(b, wb, wb, ArrayRef<int64_t>{8, 9, 10, 11, 12, 13, 14, 15});
    return {b0, b1};
  }
};

// What a tile kernel reads of the expert lists (ExpertLists.h), shared by
// its callbacks.
struct ExpertTile {
  // Function level: the block's tile and column tile.
  Value tile, nt;
  // Inside the live region: the tile's expert, its first item position,
  // its rows and the last; k (choices a token); this thread's staging item
  // (token lt, slot lj) and weight row.
  Value e, base, rowsIn, lastIn, ck, lt, lj, brow;
  std::optional<Nvfp4Staging> nvfp4;
};

// Function level, with the block: its tile and column tile of `colTiles`;
// returns whether the tile exists (meta[E + 1] tiles).
Value tileOfBlock(MmaTileScope &s, const MmaExpertsShape &shape, int64_t colTiles, ExpertTile &t) {
  ImplicitLocOpBuilder &b = s.b;
  Value cols = s.k.index(colTiles), countAt = s.k.index(shape.experts + 1);
  t.tile = arith::DivUIOp::create(b, s.bid, cols);
  t.nt = arith::RemUIOp::create(b, s.bid, cols);
  Value count = arith::IndexCastOp::create(
      b, b.getIndexType(), memref::LoadOp::create(b, s.k.arg(1), ValueRange{countAt}));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::ult, t.tile, count);
}

// Inside the live region: the tile's expert and items, this thread's
// staging item, and (NVFP4) the staging constants.
void tileItems(MmaTileScope &s, const MmaExpertsShape &shape, ExpertTile &t) {
  ImplicitLocOpBuilder &b = s.b;
  Type index = b.getIndexType();
  Value meta = s.k.arg(1), tiles = s.k.arg(2), items = s.k.arg(3);
  auto load = [&](Value ref, Value at) -> Value {
    return arith::IndexCastOp::create(b, index, memref::LoadOp::create(b, ref, ValueRange{at}));
  };
  t.ck = s.k.index(shape.k);
  Value at = arith::MulIOp::create(b, t.tile, s.c2);
  Value atRow = arith::AddIOp::create(b, at, s.c1);
  Value eWord = memref::LoadOp::create(b, tiles, ValueRange{at});
  Value r0Word = memref::LoadOp::create(b, tiles, ValueRange{atRow});
  t.e = arith::IndexCastOp::create(b, index, eWord);
  Value r0 = arith::IndexCastOp::create(b, index, r0Word);
  Value e1 = arith::AddIOp::create(b, t.e, s.c1);
  Value firstWord = memref::LoadOp::create(b, meta, ValueRange{t.e});
  Value endWord = memref::LoadOp::create(b, meta, ValueRange{e1});
  Value first = arith::IndexCastOp::create(b, index, firstWord);
  Value end = arith::IndexCastOp::create(b, index, endWord);
  t.base = arith::AddIOp::create(b, first, r0);
  t.rowsIn = arith::MinUIOp::create(b, arith::SubIOp::create(b, end, t.base), s.c128);
  t.lastIn = arith::SubIOp::create(b, t.rowsIn, s.c1);
  Value lrowIn = arith::MinUIOp::create(b, s.lrow, t.lastIn);
  Value litem = load(items, arith::AddIOp::create(b, t.base, lrowIn));
  t.lt = arith::DivUIOp::create(b, litem, t.ck);
  t.lj = arith::RemUIOp::create(b, litem, t.ck);
  if (shape.nvfp4)
    t.nvfp4.emplace(b);
}

// The weight row's raw loads for the k step at `at`: bf16, 16 weights;
// NVFP4, 8 bytes of codes and their E4M3 scale.
std::pair<Value, Value> weightLoad(MmaTileScope &s, const ExpertTile &t,
                                   const kernels::ExpertProjection &p, bool nvfp4, Value at) {
  ImplicitLocOpBuilder &b = s.b;
  Value col = arith::AddIOp::create(b, at, s.lk);
  if (!nvfp4) {
    Value col8 = arith::AddIOp::create(b, col, s.c8);
    auto v8bf = VectorType::get({8}, b.getBF16Type());
    Value w0 = vector::LoadOp::create(b, v8bf, p.w, ValueRange{t.e, t.brow, col}, false,
                                      llvm::MaybeAlign(16));
    Value w1 = vector::LoadOp::create(b, v8bf, p.w, ValueRange{t.e, t.brow, col8}, false,
                                      llvm::MaybeAlign(16));
    return {w0, w1};
  }
  Value byte = arith::DivUIOp::create(b, col, s.c2);
  Value block = arith::DivUIOp::create(b, col, s.c16);
  Value codes = vector::LoadOp::create(b, VectorType::get({8}, b.getI8Type()), p.w,
                                       ValueRange{t.e, t.brow, byte}, false, llvm::MaybeAlign(8));
  Value scale = memref::LoadOp::create(b, p.scales, ValueRange{t.e, t.brow, block});
  return {codes, scale};
}

std::pair<Value, Value> finishWeights(MmaTileScope &s, const ExpertTile &t,
                                      const MmaStaged &staged) {
  if (t.nvfp4)
    return t.nvfp4->decode(s.b, staged.w0, staged.w1);
  return {staged.w0, staged.w1}; // bf16 loads are the weights already
}

// The epilogue's walk over the warp's 8 tile rows (mma row tile i, half 0
// for c0 c1 or 1 for c2 c3): each row that holds an item gets `body` (its
// token and slot, i and half) inside an scf.if.
void forEachItemRow(MmaTileScope &s, const ExpertTile &t,
                    llvm::function_ref<void(Value, Value, int64_t, int64_t)> body) {
  ImplicitLocOpBuilder &b = s.b;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t half = 0; half < 2; ++half) {
      Value row = half ? s.ra8[i] : s.ra[i];
      Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, row, t.rowsIn);
      Value r = arith::MinUIOp::create(b, row, t.lastIn);
      Value pos = arith::AddIOp::create(b, t.base, r);
      Value word = memref::LoadOp::create(b, s.k.arg(3), ValueRange{pos});
      Value item = arith::IndexCastOp::create(b, b.getIndexType(), word);
      Value token = arith::DivUIOp::create(b, item, t.ck);
      Value slot = arith::RemUIOp::create(b, item, t.ck);
      OpBuilder::InsertionGuard guard(b);
      auto branch = scf::IfOp::create(b, ok, /*withElseRegion=*/false);
      b.setInsertionPointToStart(&branch.getThenRegion().front());
      body(token, slot, i, half);
    }
}

// The kernel arguments: the activations, the lists, the projections [E, out,
// in] and the results.
std::vector<Type> tileArgs(Builder &b, const MmaExpertsShape &s, Type in,
                           std::initializer_list<std::pair<int64_t, int64_t>> projections,
                           Type out) {
  std::vector<Type> types = {in};
  kernels::appendExpertListTypes(b, s, types);
  for (auto [rows, cols] : projections)
    kernels::appendProjectionTypes(b, s, rows, cols, types);
  types.push_back(out);
  return types;
}

} // namespace

bool mmaExpertsFit(const MmaExpertsShape &s) {
  return s.maxTokens > 1 && s.latent % kMmaTileN == 0 && s.intermediate % kGateUpCols == 0 &&
         s.latent % kMmaTileK == 0 && s.intermediate % kMmaTileK == 0 && kernels::expertListsFit(s);
}

kernels::Work mmaExpertListsWork(const MmaExpertsShape &s) { return kernels::expertListsWork(s); }
kernels::Work mmaExpertGateUpWork(const MmaExpertsShape &s) {
  return kernels::Work{s.maxTiles() * (s.intermediate / kGateUpCols) * kMmaThreads, 0, kMmaThreads};
}
kernels::Work mmaExpertDownWork(const MmaExpertsShape &s) {
  return kernels::Work{s.maxTiles() * (s.latent / kMmaTileN) * kMmaThreads, 0, kMmaThreads};
}

kernels::KernelSpec mmaExpertLists(const MmaExpertsShape &s) { return kernels::expertLists(s); }

kernels::KernelSpec mmaExpertGateUp(const MmaExpertsShape &s) {
  MmaTileKernel kernel;
  kernel.name = "expert_gateup_mma_" + kernels::expertShapeSuffix(s);
  kernel.op = "kiln.megamoe";
  kernel.tiling.set("kind", "mma-expert-gateup")
      .set("tile", std::vector<int64_t>{kMmaTileM, kMmaTileN, kMmaTileK})
      .set("block", kMmaThreads);
  kernel.args = [=](Builder &b) {
    Type f32 = b.getF32Type();
    return tileArgs(b, s, MemRefType::get({ShapedType::kDynamic, s.latent}, f32),
                    {{s.intermediate, s.latent}, {s.intermediate, s.latent}},
                    MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32));
  };
  kernel.k = s.latent;
  const unsigned np = kernels::projectionArgCount(s), hArg = 4 + 2 * np;
  auto t = std::make_shared<ExpertTile>();
  auto isUp = std::make_shared<Value>();
  kernel.setup = [=](MmaTileScope &m) {
    return tileOfBlock(m, s, s.intermediate / kGateUpCols, *t);
  };
  // Tile row r: gate (r % 32 < 16) or up, column 64 nt + 16 (r / 32) + r % 16.
  kernel.rows = [=](MmaTileScope &m) {
    ImplicitLocOpBuilder &b = m.b;
    tileItems(m, s, *t);
    Value group = arith::DivUIOp::create(b, m.lrow, m.c32);
    Value inGroup = arith::RemUIOp::create(b, m.lrow, m.c32);
    *isUp = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, inGroup, m.c16);
    Value sub = arith::RemUIOp::create(b, inGroup, m.c16);
    Value col0 = arith::MulIOp::create(b, t->nt, m.c64);
    Value col = arith::AddIOp::create(b, col0, arith::MulIOp::create(b, group, m.c16));
    t->brow = arith::AddIOp::create(b, col, sub);
  };
  kernel.load = [=](MmaTileScope &m, Value at) {
    ImplicitLocOpBuilder &b = m.b;
    MmaStaged staged;
    staged.a = mmaActivationLoad(m, m.k.arg(0), t->lt, at);
    auto v8 = [&](Type elem) -> Type { return VectorType::get({8}, elem); };
    Type i8 = b.getI8Type(), bf16 = b.getBF16Type();
    SmallVector<Type, 2> rawTypes = {v8(s.nvfp4 ? i8 : bf16), s.nvfp4 ? i8 : v8(bf16)};
    auto pick = scf::IfOp::create(b, rawTypes, *isUp, /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&pick.getThenRegion().front());
      auto [u0, u1] = weightLoad(m, *t, projection(m.k, 4 + np, s.nvfp4), s.nvfp4, at);
      scf::YieldOp::create(b, ValueRange{u0, u1});
      b.setInsertionPointToStart(&pick.getElseRegion().front());
      auto [g0, g1] = weightLoad(m, *t, projection(m.k, 4, s.nvfp4), s.nvfp4, at);
      scf::YieldOp::create(b, ValueRange{g0, g1});
    }
    staged.w0 = pick.getResult(0);
    staged.w1 = pick.getResult(1);
    return staged;
  };
  kernel.finish = [=](MmaTileScope &m, const MmaStaged &staged) {
    return finishWeights(m, *t, staged);
  };
  // Warp wn's mma tiles j = 0, 1 are gate columns 64 nt + 16 wn + 8 j + 2 t
  // (and the next); tiles j + 2 are up for the same columns.
  kernel.epilogue = [=](MmaTileScope &m, ValueRange res) {
    ImplicitLocOpBuilder &b = m.b;
    Value gateGlobal = projection(m.k, 4, s.nvfp4).loadGlobal(b, t->e);
    Value upGlobal = projection(m.k, 4 + np, s.nvfp4).loadGlobal(b, t->e);
    Value col0 = arith::MulIOp::create(b, t->nt, m.c64);
    Value col1 = arith::AddIOp::create(b, col0, arith::MulIOp::create(b, m.wn, m.c16));
    Value col = arith::AddIOp::create(b, col1, arith::MulIOp::create(b, m.t, m.c2));
    Value col8 = arith::AddIOp::create(b, col, m.c8);
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    forEachItemRow(m, *t, [&](Value token, Value slot, int64_t i, int64_t half) {
      for (int64_t j = 0; j < 2; ++j) {
        Value hs[2];
        for (int64_t e = 0; e < 2; ++e) {
          const int64_t at = 2 * half + e;
          Value g = LLVM::ExtractValueOp::create(b, res[4 * i + j], ArrayRef<int64_t>{at});
          Value u = LLVM::ExtractValueOp::create(b, res[4 * i + j + 2], ArrayRef<int64_t>{at});
          if (s.nvfp4) {
            g = arith::MulFOp::create(b, g, gateGlobal);
            u = arith::MulFOp::create(b, u, upGlobal);
          }
          hs[e] = kernels::swiGlu(b, g, u, one);
        }
        Value v = vector::FromElementsOp::create(b, VectorType::get({2}, b.getF32Type()),
                                                 ValueRange{hs[0], hs[1]});
        vector::StoreOp::create(b, v, m.k.arg(hArg), ValueRange{token, slot, j ? col8 : col}, false,
                                llvm::MaybeAlign(8));
      }
    });
  };
  return buildMmaTileKernel(kernel);
}

kernels::KernelSpec mmaExpertDown(const MmaExpertsShape &s) {
  MmaTileKernel kernel;
  kernel.name = "expert_down_mma_" + kernels::expertShapeSuffix(s);
  kernel.op = "kiln.megamoe";
  kernel.tiling.set("kind", "mma-expert-down")
      .set("tile", std::vector<int64_t>{kMmaTileM, kMmaTileN, kMmaTileK})
      .set("block", kMmaThreads);
  kernel.args = [=](Builder &b) {
    Type f32 = b.getF32Type();
    return tileArgs(b, s, MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32),
                    {{s.latent, s.intermediate}},
                    MemRefType::get({ShapedType::kDynamic, s.k, s.latent}, f32));
  };
  kernel.k = s.intermediate;
  const unsigned yArg = 4 + kernels::projectionArgCount(s);
  auto t = std::make_shared<ExpertTile>();
  kernel.setup = [=](MmaTileScope &m) { return tileOfBlock(m, s, s.latent / kMmaTileN, *t); };
  kernel.rows = [=](MmaTileScope &m) {
    ImplicitLocOpBuilder &b = m.b;
    tileItems(m, s, *t);
    t->brow = arith::AddIOp::create(b, arith::MulIOp::create(b, t->nt, m.c128), m.lrow);
  };
  kernel.load = [=](MmaTileScope &m, Value at) {
    MmaStaged staged;
    staged.a = mmaActivationLoad(m, m.k.arg(0), ValueRange{t->lt, t->lj}, at);
    std::tie(staged.w0, staged.w1) = weightLoad(m, *t, projection(m.k, 4, s.nvfp4), s.nvfp4, at);
    return staged;
  };
  kernel.finish = [=](MmaTileScope &m, const MmaStaged &staged) {
    return finishWeights(m, *t, staged);
  };
  kernel.epilogue = [=](MmaTileScope &m, ValueRange res) {
    ImplicitLocOpBuilder &b = m.b;
    Value global = projection(m.k, 4, s.nvfp4).loadGlobal(b, t->e);
    Value col0 = arith::MulIOp::create(b, t->nt, m.c128);
    Value t2 = arith::MulIOp::create(b, m.t, m.c2);
    Value col[4];
    for (int64_t j = 0; j < 4; ++j)
      col[j] = arith::AddIOp::create(b, arith::AddIOp::create(b, col0, m.rbWarp[j]), t2);
    forEachItemRow(m, *t, [&](Value token, Value slot, int64_t i, int64_t half) {
      for (int64_t j = 0; j < 4; ++j) {
        Value ys[2];
        for (int64_t e = 0; e < 2; ++e) {
          ys[e] = LLVM::ExtractValueOp::create(b, res[4 * i + j], ArrayRef<int64_t>{2 * half + e});
          if (s.nvfp4)
            ys[e] = arith::MulFOp::create(b, ys[e], global);
        }
        Value v = vector::FromElementsOp::create(b, VectorType::get({2}, b.getF32Type()),
                                                 ValueRange{ys[0], ys[1]});
        vector::StoreOp::create(b, v, m.k.arg(yArg), ValueRange{token, slot, col[j]}, false,
                                llvm::MaybeAlign(8));
      }
    });
  };
  return buildMmaTileKernel(kernel);
}

} // namespace kiln::nvptx
