// Built as typed IR (KernelBuilder.h).
#include "targets/common/GroupedExperts.h"

#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/SwiGlu.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

std::string formatSuffix(bool nvfp4) { return nvfp4 ? "_nvfp4" : "_bf16"; }

// One pass's item i: its token t, choice j, and whether it exists (a pass's
// missing items repeat the last one and store nothing).
struct PassItem {
  Value t, j, in;
};

// The loops of a grouped kernel: a warp per (expert e, group grp of its
// output rows), then passes over the expert's items, kGroupedItems at a
// time. Leaves the builder inside the pass loop.
struct GroupedLoop {
  Value lead, e, grp;
  PassItem items[kGroupedItems];
};

GroupedLoop groupedLoop(ImplicitLocOpBuilder &b, const WarpOfPart &w, const ExpertTileShape &s,
                        Value meta, Value items, int64_t groups) {
  Value ck = arith::ConstantIndexOp::create(b, s.k);
  Value groupCount = arith::ConstantIndexOp::create(b, groups);
  Value work = arith::ConstantIndexOp::create(b, s.experts * groups);
  Value pass = arith::ConstantIndexOp::create(b, kGroupedItems);
  GroupedLoop g;
  g.lead = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, w.lane, w.c0);
  auto warps = scf::ForOp::create(b, w.warp, work, w.warps);
  b.setInsertionPointToStart(warps.getBody());
  g.e = arith::DivUIOp::create(b, warps.getInductionVar(), groupCount);
  g.grp = arith::RemUIOp::create(b, warps.getInductionVar(), groupCount);
  Value e1 = arith::AddIOp::create(b, g.e, w.c1);
  Value firstWord = memref::LoadOp::create(b, meta, ValueRange{g.e});
  Value endWord = memref::LoadOp::create(b, meta, ValueRange{e1});
  Type index = b.getIndexType();
  Value first = arith::IndexCastOp::create(b, index, firstWord);
  Value end = arith::IndexCastOp::create(b, index, endWord);
  Value last = arith::SubIOp::create(b, end, w.c1);
  auto passes = scf::ForOp::create(b, first, end, pass);
  b.setInsertionPointToStart(passes.getBody());
  for (int64_t i = 0; i < kGroupedItems; ++i) {
    Value at =
        arith::AddIOp::create(b, passes.getInductionVar(), arith::ConstantIndexOp::create(b, i));
    PassItem &item = g.items[i];
    item.in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, at, end);
    Value pos = arith::MinUIOp::create(b, at, last);
    Value word = memref::LoadOp::create(b, items, ValueRange{pos});
    Value flat = arith::IndexCastOp::create(b, index, word);
    item.t = arith::DivUIOp::create(b, flat, ck);
    item.j = arith::RemUIOp::create(b, flat, ck);
  }
  return g;
}

// Every (weight row, item) product of a pass: each row of `rows` once per
// item, reading the item's row of the vector (t, or t, j `byChoice`).
SmallVector<warp::Row> perItem(ArrayRef<warp::Row> rows, const GroupedLoop &g, bool byChoice) {
  SmallVector<warp::Row> out;
  for (const PassItem &item : g.items)
    for (warp::Row row : rows) {
      row.xAt = {item.t};
      if (byChoice)
        row.xAt.push_back(item.j);
      out.push_back(row);
    }
  return out;
}

// The kernel's arguments: the vector (z or h), the lists, the projections,
// the result (h or y).
std::vector<Type> groupedArgs(Builder &b, const ExpertTileShape &s, Type in,
                              ArrayRef<std::pair<int64_t, int64_t>> projections, Type out) {
  std::vector<Type> types = {in};
  appendExpertListTypes(b, s, types);
  for (auto [rows, cols] : projections)
    appendProjectionTypes(b, s, rows, cols, types);
  types.push_back(out);
  return types;
}

KernelSpec expertGateUpGrouped(const ExpertTileShape &s) {
  // A warp: rows 2 grp and 2 grp + 1 of gate and of up, h = silu(gate z) *
  // (up z) per item.
  std::string name = "expert_gateup_grouped_" + expertShapeSuffix(s);
  Tiling tiling;
  tiling.set("kind", "warp-gemv-grouped" + formatSuffix(s.nvfp4))
      .set("parallel", "experts*intermediate")
      .set("items_per_pass", kGroupedItems);
  auto args = [&](Builder &b) {
    Type f32 = b.getF32Type();
    return groupedArgs(b, s, MemRefType::get({ShapedType::kDynamic, s.latent}, f32),
                       {{s.intermediate, s.latent}, {s.intermediate, s.latent}},
                       MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32));
  };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    const unsigned p = projectionArgCount(s);
    ValueRange all = k.func.getArguments();
    Value z = all[0], meta = all[1], items = all[3], h = all[4 + 2 * p];
    ExpertProjection gate = expertProjection(all, 4, s.nvfp4);
    ExpertProjection up = expertProjection(all, 4 + p, s.nvfp4);
    WarpOfPart wp = warpOfPart(k);
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    Value c2 = k.index(2);
    GroupedLoop g = groupedLoop(b, wp, s, meta, items, s.intermediate / 2);
    Value o0 = arith::MulIOp::create(b, g.grp, c2);
    Value o1 = arith::AddIOp::create(b, o0, wp.c1);
    Value gateGlobal = gate.loadGlobal(b, g.e), upGlobal = up.loadGlobal(b, g.e);
    SmallVector<warp::Row> rows = warp::projectionRows(gate, g.e, {o0, o1}, gateGlobal);
    rows.append(warp::projectionRows(up, g.e, {o0, o1}, upGlobal));
    // perItem's order: item 0's gate o0, o1, up o0, o1, then item 1's.
    SmallVector<Value> dots =
        warp::rowsDot(b, wp, perItem(rows, g, false), s.nvfp4, z, g.items[0].t, s.latent, Value(),
                      warp::Nvfp4Lanes::Grouped);
    SmallVector<Value> sums = warp::warpSums(b, dots);
    auto lead = scf::IfOp::create(b, g.lead, /*withElseRegion=*/false);
    b.setInsertionPointToStart(&lead.getThenRegion().front());
    for (int64_t i = 0; i < kGroupedItems; ++i) {
      OpBuilder::InsertionGuard guard(b);
      auto in = scf::IfOp::create(b, g.items[i].in, /*withElseRegion=*/false);
      b.setInsertionPointToStart(&in.getThenRegion().front());
      Value o[2] = {o0, o1};
      for (int64_t r = 0; r < 2; ++r)
        memref::StoreOp::create(b, swiGlu(b, sums[4 * i + r], sums[4 * i + 2 + r], one), h,
                                ValueRange{g.items[i].t, g.items[i].j, o[r]});
    }
  });
}

KernelSpec expertDownGrouped(const ExpertTileShape &s) {
  // A warp: rows 4 grp .. 4 grp + 3 of down, y = down h per item.
  std::string name = "expert_down_grouped_" + expertShapeSuffix(s);
  Tiling tiling;
  tiling.set("kind", "warp-gemv-grouped" + formatSuffix(s.nvfp4))
      .set("parallel", "experts*latent")
      .set("items_per_pass", kGroupedItems);
  auto args = [&](Builder &b) {
    Type f32 = b.getF32Type();
    return groupedArgs(b, s, MemRefType::get({ShapedType::kDynamic, s.k, s.intermediate}, f32),
                       {{s.latent, s.intermediate}},
                       MemRefType::get({ShapedType::kDynamic, s.k, s.latent}, f32));
  };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k) {
    ImplicitLocOpBuilder &b = k.b;
    const unsigned p = projectionArgCount(s);
    ValueRange all = k.func.getArguments();
    Value h = all[0], meta = all[1], items = all[3], y = all[4 + p];
    ExpertProjection down = expertProjection(all, 4, s.nvfp4);
    WarpOfPart wp = warpOfPart(k);
    Value c2 = k.index(2), c3 = k.index(3), c4 = k.index(4);
    GroupedLoop g = groupedLoop(b, wp, s, meta, items, s.latent / 4);
    Value o0 = arith::MulIOp::create(b, g.grp, c4);
    SmallVector<Value> o = {o0};
    for (Value step : {wp.c1, c2, c3})
      o.push_back(arith::AddIOp::create(b, o0, step));
    Value global = down.loadGlobal(b, g.e);
    SmallVector<Value> dots = warp::rowsDot(
        b, wp, perItem(warp::projectionRows(down, g.e, o, global), g, true), s.nvfp4, h,
        ValueRange{g.items[0].t, g.items[0].j}, s.intermediate, Value(), warp::Nvfp4Lanes::Grouped);
    SmallVector<Value> sums = warp::warpSums(b, dots);
    auto lead = scf::IfOp::create(b, g.lead, /*withElseRegion=*/false);
    b.setInsertionPointToStart(&lead.getThenRegion().front());
    for (int64_t i = 0; i < kGroupedItems; ++i) {
      OpBuilder::InsertionGuard guard(b);
      auto in = scf::IfOp::create(b, g.items[i].in, /*withElseRegion=*/false);
      b.setInsertionPointToStart(&in.getThenRegion().front());
      for (int64_t r = 0; r < 4; ++r)
        memref::StoreOp::create(b, sums[4 * i + r], y,
                                ValueRange{g.items[i].t, g.items[i].j, o[r]});
    }
  });
}

} // namespace

bool groupedExpertsFit(const ExpertTileShape &s) {
  // Whole groups of 2 and 4 rows.
  return expertListsFit(s) && warpMoEFits(s.intermediate, s.latent);
}

TargetHooks::MatrixExperts groupedExperts(const ExpertTileShape &s) {
  // Warps of 32 over an expert's rows: 2 of gate and of up, then 4 of down.
  return TargetHooks::MatrixExperts{expertLists(s),
                                    expertGateUpGrouped(s),
                                    expertDownGrouped(s),
                                    expertListsWork(s),
                                    Work{warp::kWarp * s.experts * s.intermediate / 2, 0},
                                    Work{warp::kWarp * s.experts * s.latent / 4, 0},
                                    s.experts + 2,
                                    2 * s.maxTiles(),
                                    s.maxItems()};
}

} // namespace kiln::kernels
