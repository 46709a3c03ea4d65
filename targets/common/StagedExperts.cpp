// The expert stage's products for one token at a time (batch-1 decode) with
// NVFP4 weights, the block's vector staged once in shared memory.
// WarpGemv.cpp's warp kernels give each lane 32 contiguous elements of a row
// (one 16-byte load of codes), so each lane reads 32 contiguous elements of
// the vector too, and every load of it spans 32 cache lines: the vector's
// loads, not the weights', kept those kernels at a third of DRAM's rate.
// Here a block of kStagedWarps warps covers kStagedItems items a warp, all of
// them products with one vector (a token's z for gate/up, one selected
// expert's h for down); the block copies that vector into shared memory in
// the order the lanes read it (warp::stageVectorInLaneOrder), and every
// lane's load of it is then part of a contiguous 512 bytes. Where the target
// converts E4M3 pairs to f16 pairs (PackedStagedDot.h), the vector is staged
// in f16 and the products are packed f16 pairs; elsewhere in f32.
#include "targets/common/ExpertLists.h"
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/PackedStagedDot.h"
#include "targets/common/SwiGlu.h"
#include "targets/common/TargetHooks.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

#include <functional>
#include <string>

namespace kiln::kernels {

using namespace mlir;

namespace {

constexpr int64_t kStagedWarps = 8, kStagedItems = 2,
                  kStagedItemsPerBlock = kStagedWarps * kStagedItems;

// What a staged kernel's body starts from: its warp (lane, warp in the
// block), the block's token and first item, and the staged vector.
struct StagedBlock {
  WarpOfPart warp;
  Value thread, token, first, staged;
};

// The block's token and first item, and the block's vector staged: the row
// of `vector` (`width` f32) at the indices vectorAt(token, first item)
// gives. Blocks are laid out token-major, itemsPerToken /
// kStagedItemsPerBlock a token. The builder is left inside `if token <
// rows`, after the block's barrier.
StagedBlock stageBlock(KernelScope &k, const std::string &name, Value vector, int64_t width,
                       int64_t itemsPerToken, Value rows,
                       const std::function<SmallVector<Value, 2>(Value, Value)> &vectorAt,
                       bool pairs) {
  ImplicitLocOpBuilder &b = k.b;
  SharedBuffer vectorCopy = declareSharedBuffer(k, name + "_vector", {width},
                                                pairs ? Type(b.getF16Type()) : b.getF32Type());
  StagedBlock s;
  s.warp.c0 = k.index(0);
  s.warp.c1 = k.index(1);
  s.warp.c32 = k.index(32);
  s.thread = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
  Value block = gpu::BlockIdOp::create(b, gpu::Dimension::x);
  s.warp.lane = arith::RemUIOp::create(b, s.thread, s.warp.c32);
  s.warp.warp = arith::DivUIOp::create(b, s.thread, s.warp.c32);
  s.warp.warps = k.index(kStagedWarps);
  Value blocksPerToken = k.index(itemsPerToken / kStagedItemsPerBlock);
  s.token = arith::DivUIOp::create(b, block, blocksPerToken);
  s.first = arith::MulIOp::create(b, arith::RemUIOp::create(b, block, blocksPerToken),
                                  k.index(kStagedItemsPerBlock));
  // Whole blocks past the call's tokens leave together (the barrier below
  // is reached by all of a block's threads or none).
  auto inRange = scf::IfOp::create(
      b, arith::CmpIOp::create(b, arith::CmpIPredicate::ult, s.token, rows), false);
  b.setInsertionPointToStart(&inRange.getThenRegion().front());
  s.staged = vectorCopy.get(b);
  if (pairs)
    warp::stageVectorInPairOrder(b, vector, vectorAt(s.token, s.first), width, s.staged, s.thread,
                                 kStagedWarps * warp::kWarp);
  else
    warp::stageVectorInLaneOrder(b, vector, vectorAt(s.token, s.first), width, s.staged, s.thread,
                                 kStagedWarps * warp::kWarp);
  gpu::BarrierOp::create(b);
  return s;
}

Tiling stagedTiling(int64_t rowsPerWarp, bool pairs) {
  Tiling tiling;
  tiling.set("kind", pairs ? "staged-gemv_nvfp4_f16x2" : "staged-gemv_nvfp4")
      .set("warps", kStagedWarps)
      .set("items_per_warp", kStagedItems)
      .set("rows_per_warp", rowsPerWarp);
  return tiling;
}

// The loop over the warp's kStagedItems items (warp, warp + kStagedWarps,
// ... from the block's first); the builder is left inside it.
Value stagedItemLoop(KernelScope &k, const StagedBlock &s) {
  ImplicitLocOpBuilder &b = k.b;
  auto loop = scf::ForOp::create(b, s.warp.c0, k.index(kStagedItems), s.warp.c1);
  b.setInsertionPointToStart(loop.getBody());
  Value step = arith::MulIOp::create(b, loop.getInductionVar(), s.warp.warps);
  return arith::AddIOp::create(b, s.first, arith::AddIOp::create(b, step, s.warp.warp));
}

// This lane's part of each row's dot with the staged vector's first `k`
// elements, in packed f16 pairs where `toF16` is given.
SmallVector<Value> stagedDot(ImplicitLocOpBuilder &b, const StagedBlock &s,
                             ArrayRef<warp::Row> rows, int64_t k, const E4m3PairToF16 *toF16) {
  if (toF16)
    return warp::packedStagedDot(b, s.warp, rows, s.staged, k, *toF16);
  return warp::rowsDot(b, s.warp, rows, true, s.staged, ValueRange{}, k, Value(),
                       warp::Nvfp4Lanes::StagedVector);
}

std::string stagedName(const std::string &projection, bool broken, const E4m3PairToF16 *toF16) {
  return "expert_" + projection + "_staged_" + (toF16 ? "f16x2_" : "") + (broken ? "broken_" : "");
}

void storeFromLaneZero(ImplicitLocOpBuilder &b, const WarpOfPart &w,
                       const std::function<void()> &stores) {
  auto lead =
      scf::IfOp::create(b, arith::CmpIOp::create(b, arith::CmpIPredicate::eq, w.lane, w.c0), false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&lead.getThenRegion().front());
  stores();
}

} // namespace

bool stagedExpertsFit(int64_t intermediate, int64_t latent) {
  return intermediate % 1024 == 0 && latent % 1024 == 0 &&
         (intermediate / 2) % kStagedItemsPerBlock == 0 && (latent / 4) % kStagedItemsPerBlock == 0;
}

Work stagedGateUpWork(int64_t k, int64_t intermediate) {
  const int64_t threads = kStagedWarps * warp::kWarp;
  return Work{0, k * intermediate / 2 / kStagedItemsPerBlock * threads, threads};
}

Work stagedDownWork(int64_t k, int64_t latent) {
  const int64_t threads = kStagedWarps * warp::kWarp;
  return Work{0, k * latent / 4 / kStagedItemsPerBlock * threads, threads};
}

KernelSpec expertGateUpStaged(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                              bool dropLastChunk, const E4m3PairToF16 *toF16) {
  // An item: rows o0, o0 + 1 of gate and of up, four rows sharing each load
  // of the staged z.
  std::string name = stagedName("gateup", dropLastChunk, toF16) + str(experts) + "e_top" + str(k) +
                     "_" + str(intermediate) + "x" + str(latent) + "_nvfp4";
  const ExpertTileShape shape{experts, k, intermediate, latent, true, 0};
  Tiling tiling = stagedTiling(2, toF16 != nullptr);
  auto args = [&](Builder &b) { return expertGateUpArgTypes(b, shape); };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    const unsigned p = projectionArgCount(shape);
    ValueRange all = k_.func.getArguments();
    Value z = all[0], idx = all[1], h = all[2 + 2 * p], rows = k_.argIndex(3 + 2 * p);
    ExpertProjection gate = expertProjection(all, 2, true);
    ExpertProjection up = expertProjection(all, 2 + p, true);
    const int64_t groups = intermediate / 2;
    StagedBlock s = stageBlock(
        k_, name, z, latent, k * groups, rows,
        [](Value t, Value) { return SmallVector<Value, 2>{t}; }, toF16 != nullptr);
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    Value item = stagedItemLoop(k_, s);
    Value groupCount = k_.index(groups);
    Value j = arith::DivUIOp::create(b, item, groupCount);
    Value o0 = arith::MulIOp::create(b, arith::RemUIOp::create(b, item, groupCount), k_.index(2));
    Value o1 = arith::AddIOp::create(b, o0, s.warp.c1);
    Value e = chosenExpert(b, idx, s.token, j);
    SmallVector<warp::Row> dotRows = warp::projectionRows(gate, e, {o0, o1}, gate.loadGlobal(b, e));
    dotRows.append(warp::projectionRows(up, e, {o0, o1}, up.loadGlobal(b, e)));
    SmallVector<Value> sums =
        warp::warpSums(b, stagedDot(b, s, dotRows, dropLastChunk ? latent - 1024 : latent, toF16));
    // h = silu(gate z) * (up z)
    storeFromLaneZero(b, s.warp, [&] {
      Value o[2] = {o0, o1};
      for (int r = 0; r < 2; ++r)
        memref::StoreOp::create(b, swiGlu(b, sums[r], sums[2 + r], one), h,
                                ValueRange{s.token, j, o[r]});
    });
  });
}

KernelSpec expertDownStaged(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            const E4m3PairToF16 *toF16) {
  // An item: rows o0 .. o0 + 3 of down, sharing each load of the staged h
  // of the block's selected expert (a block's items never span two).
  std::string name = stagedName("down", false, toF16) + str(experts) + "e_top" + str(k) + "_" +
                     str(latent) + "x" + str(intermediate) + "_nvfp4";
  const ExpertTileShape shape{experts, k, intermediate, latent, true, 0};
  Tiling tiling = stagedTiling(4, toF16 != nullptr);
  auto args = [&](Builder &b) { return expertDownArgTypes(b, shape); };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    const unsigned p = projectionArgCount(shape);
    ValueRange all = k_.func.getArguments();
    Value h = all[0], idx = all[1], y = all[2 + p], rows = k_.argIndex(3 + p);
    ExpertProjection down = expertProjection(all, 2, true);
    const int64_t groups = latent / 4;
    Value groupCount = k_.index(groups);
    StagedBlock s = stageBlock(
        k_, name, h, intermediate, k * groups, rows,
        [&](Value t, Value first) {
          return SmallVector<Value, 2>{t, arith::DivUIOp::create(b, first, groupCount)};
        },
        toF16 != nullptr);
    Value item = stagedItemLoop(k_, s);
    Value j = arith::DivUIOp::create(b, item, groupCount);
    Value o0 = arith::MulIOp::create(b, arith::RemUIOp::create(b, item, groupCount), k_.index(4));
    SmallVector<Value> o = {o0};
    for (int r = 1; r < 4; ++r)
      o.push_back(arith::AddIOp::create(b, o0, k_.index(r)));
    Value e = chosenExpert(b, idx, s.token, j);
    SmallVector<Value> sums =
        warp::warpSums(b, stagedDot(b, s, warp::projectionRows(down, e, o, down.loadGlobal(b, e)),
                                    intermediate, toF16));
    storeFromLaneZero(b, s.warp, [&] {
      for (int r = 0; r < 4; ++r)
        memref::StoreOp::create(b, sums[r], y, ValueRange{s.token, j, o[r]});
    });
  });
}

} // namespace kiln::kernels
