#include "targets/common/ExpertLists.h"

#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

constexpr int64_t kListThreads = 1024;

} // namespace

std::string expertShapeSuffix(const ExpertTileShape &s) {
  return str(s.experts) + "e_top" + str(s.k) + "_" + str(s.intermediate) + "x" + str(s.latent) +
         "_t" + str(s.maxTokens) + (s.nvfp4 ? "_nvfp4" : "_bf16");
}

void appendExpertListTypes(Builder &b, const ExpertTileShape &s, std::vector<Type> &types) {
  Type i32 = b.getI32Type();
  types.push_back(MemRefType::get({s.experts + 2}, i32));
  types.push_back(MemRefType::get({2 * s.maxTiles()}, i32));
  types.push_back(MemRefType::get({s.maxItems()}, i32));
}

void appendProjectionTypes(Builder &b, const ExpertTileShape &s, int64_t out, int64_t in,
                           std::vector<Type> &types) {
  if (!s.nvfp4) {
    types.push_back(MemRefType::get({s.experts, out, in}, b.getBF16Type()));
    return;
  }
  types.push_back(MemRefType::get({s.experts, out, in / 2}, b.getI8Type()));
  types.push_back(MemRefType::get({s.experts, out, in / 16}, b.getI8Type()));
  types.push_back(MemRefType::get({s.experts}, b.getF32Type()));
}

Value ExpertProjection::loadGlobal(ImplicitLocOpBuilder &b, Value e) const {
  return globals ? memref::LoadOp::create(b, globals, ValueRange{e}).getResult() : Value();
}

ExpertProjection expertProjection(ValueRange args, unsigned first, bool nvfp4) {
  if (!nvfp4)
    return ExpertProjection{args[first], Value(), Value()};
  return ExpertProjection{args[first], args[first + 1], args[first + 2]};
}

std::vector<Type> expertGateUpArgTypes(Builder &b, const ExpertTileShape &s) {
  Type f32 = b.getF32Type();
  std::vector<Type> types = {MemRefType::get({ShapedType::kDynamic, s.latent}, f32),
                             MemRefType::get({ShapedType::kDynamic, s.k}, b.getI32Type())};
  appendProjectionTypes(b, s, s.intermediate, s.latent, types); // gate
  appendProjectionTypes(b, s, s.intermediate, s.latent, types); // up
  types.push_back(MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32));
  types.push_back(b.getI64Type());
  return types;
}

std::vector<Type> expertDownArgTypes(Builder &b, const ExpertTileShape &s) {
  Type f32 = b.getF32Type();
  std::vector<Type> types = {MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32),
                             MemRefType::get({ShapedType::kDynamic, s.k}, b.getI32Type())};
  appendProjectionTypes(b, s, s.latent, s.intermediate, types);
  types.push_back(MemRefType::get({ShapedType::kDynamic, s.k, s.latent}, f32));
  types.push_back(b.getI64Type());
  return types;
}

Value chosenExpert(ImplicitLocOpBuilder &b, Value idx, Value t, Value j) {
  Value chosen = memref::LoadOp::create(b, idx, ValueRange{t, j});
  Value clamped = arith::MaxSIOp::create(b, chosen, arith::ConstantIntOp::create(b, 0, 32));
  return arith::IndexCastOp::create(b, b.getIndexType(), clamped);
}

bool expertListsFit(const ExpertTileShape &s) { return s.experts <= kListThreads; }

Work expertListsWork(const ExpertTileShape &) { return Work{kListThreads, 0, kListThreads}; }

// Built as typed IR (KernelBuilder.h): one block of 1024 threads, four
// workgroup arrays of E counters (items, items placed, first position,
// first tile).
KernelSpec expertLists(const ExpertTileShape &s) {
  // Lists of other than 128-item tiles say so in their name.
  std::string name = "expert_lists_" +
                     (s.tileRows == kExpertTileRows ? std::string() : "r" + str(s.tileRows) + "_") +
                     expertShapeSuffix(s);
  Tiling tiling;
  tiling.set("kind", "expert-lists").set("block", kListThreads);
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type i32 = b.getI32Type();
    std::vector<Type> types = {MemRefType::get({ShapedType::kDynamic, s.k}, i32)};
    appendExpertListTypes(b, s, types);
    types.push_back(b.getI64Type());
    return types;
  };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    Type i32 = b.getI32Type(), index = b.getIndexType();
    const char *sharedNames[4] = {"count", "fill", "start", "tile"};
    SharedBuffer shared[4];
    for (int i = 0; i < 4; ++i)
      shared[i] = declareSharedBuffer(k, name + "_" + sharedNames[i], {s.experts}, i32);
    Value idx = k.arg(0), meta = k.arg(1), tiles = k.arg(2), items = k.arg(3);
    Value c0 = k.index(0), c1 = k.index(1), c2 = k.index(2), cRows = k.index(s.tileRows);
    Value ck = k.index(s.k), ce = k.index(s.experts);
    Value totalAt = k.index(s.experts), tilesAt = k.index(s.experts + 1);
    Value threads = k.index(kListThreads);
    Value zero = k.i32(0), one = k.i32(1), iRowsLess1 = k.i32(s.tileRows - 1),
          iRows = k.i32(s.tileRows);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value rows = k.argIndex(4);
    Value nItems = arith::MulIOp::create(b, rows, ck);
    Value count = shared[0].get(b), fill = shared[1].get(b), start = shared[2].get(b),
          tile = shared[3].get(b);
    // A strided loop of the block's threads over [0, end); its body gets
    // the induction variable.
    auto strided = [&](Value end, function_ref<void(Value)> body) {
      auto loop = scf::ForOp::create(b, tid, end, threads);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(loop.getBody());
      body(loop.getInductionVar());
    };
    // An item's expert where this rank lists it (-1: another rank's expert,
    // expert parallelism; not listed): `body` gets the expert as an index.
    auto ifListed = [&](Value i, function_ref<void(Value)> body) {
      Value t = arith::DivUIOp::create(b, i, ck);
      Value j = arith::RemUIOp::create(b, i, ck);
      Value e32 = memref::LoadOp::create(b, idx, ValueRange{t, j});
      Value here = arith::CmpIOp::create(b, arith::CmpIPredicate::sge, e32, zero);
      auto ifHere = scf::IfOp::create(b, here, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifHere.getThenRegion().front());
      body(arith::IndexCastOp::create(b, index, e32));
    };
    auto tilesOf = [&](Value n) {
      Value up = arith::AddIOp::create(b, n, iRowsLess1);
      return arith::DivUIOp::create(b, up, iRows).getResult();
    };

    strided(ce, [&](Value e) {
      memref::StoreOp::create(b, zero, count, ValueRange{e});
      memref::StoreOp::create(b, zero, fill, ValueRange{e});
    });
    gpu::BarrierOp::create(b);
    // Items per expert.
    strided(nItems, [&](Value i) {
      ifListed(i, [&](Value e) {
        memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, one, count, ValueRange{e});
      });
    });
    gpu::BarrierOp::create(b);
    // Each expert's first position and first tile, in expert order.
    Value lead = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, tid, c0);
    {
      auto ifLead = scf::IfOp::create(b, lead, /*withElse=*/false);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifLead.getThenRegion().front());
      auto sums = scf::ForOp::create(b, c0, ce, c1, ValueRange{zero, zero});
      {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPointToStart(sums.getBody());
        Value e = sums.getInductionVar();
        Value at = sums.getRegionIterArgs()[0], tilesBefore = sums.getRegionIterArgs()[1];
        memref::StoreOp::create(b, at, start, ValueRange{e});
        memref::StoreOp::create(b, at, meta, ValueRange{e});
        memref::StoreOp::create(b, tilesBefore, tile, ValueRange{e});
        Value n = memref::LoadOp::create(b, count, ValueRange{e});
        Value next = arith::AddIOp::create(b, at, n);
        Value tilesNext = arith::AddIOp::create(b, tilesBefore, tilesOf(n));
        scf::YieldOp::create(b, ValueRange{next, tilesNext});
      }
      memref::StoreOp::create(b, sums.getResult(0), meta, ValueRange{totalAt});
      memref::StoreOp::create(b, sums.getResult(1), meta, ValueRange{tilesAt});
    }
    gpu::BarrierOp::create(b);
    // The tiles: (expert, first row) for each tileRows of an expert's items.
    strided(ce, [&](Value e) {
      Value n = memref::LoadOp::create(b, count, ValueRange{e});
      Value t0i = memref::LoadOp::create(b, tile, ValueRange{e});
      Value nTiles = arith::IndexCastOp::create(b, index, tilesOf(n));
      Value t0 = arith::IndexCastOp::create(b, index, t0i);
      Value e32 = arith::IndexCastOp::create(b, i32, e);
      auto q = scf::ForOp::create(b, c0, nTiles, c1);
      b.setInsertionPointToStart(q.getBody());
      Value slot = arith::AddIOp::create(b, t0, q.getInductionVar());
      Value at = arith::MulIOp::create(b, slot, c2);
      Value at1 = arith::AddIOp::create(b, at, c1);
      Value row = arith::MulIOp::create(b, q.getInductionVar(), cRows);
      Value row32 = arith::IndexCastOp::create(b, i32, row);
      memref::StoreOp::create(b, e32, tiles, ValueRange{at});
      memref::StoreOp::create(b, row32, tiles, ValueRange{at1});
    });
    // The items, grouped by expert.
    strided(nItems, [&](Value i) {
      ifListed(i, [&](Value e) {
        Value slot =
            memref::AtomicRMWOp::create(b, arith::AtomicRMWKind::addi, one, fill, ValueRange{e});
        Value first = memref::LoadOp::create(b, start, ValueRange{e});
        Value pos32 = arith::AddIOp::create(b, first, slot);
        Value pos = arith::IndexCastOp::create(b, index, pos32);
        Value item = arith::IndexCastOp::create(b, i32, i);
        memref::StoreOp::create(b, item, items, ValueRange{pos});
      });
    });
  });
}

} // namespace kiln::kernels
