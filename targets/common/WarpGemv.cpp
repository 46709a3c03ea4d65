// GPU GEMV-shaped products, one warp per output element: the dense linear
// (bf16 weights) and the products of the latent MoE's expert stage (gate/up
// with SwiGLU, then down; GpuRowKernels.cpp has the per-expert RMSNorm and
// the weighted sum).
// Decode reads every weight once, so these kernels are built to stream
// weights: each lane loads its own 16 contiguous bytes of a row per step,
// NVFP4 codes are decoded in registers (WarpDot.h), and the warp sums its
// lanes with shuffles. Rows of the input beyond the first re-read the
// weights from cache; prefill-shaped products belong to tensor-core kernels.
// Built as typed IR (KernelBuilder.h).
#include "targets/common/ExpertLists.h"
#include "targets/common/Generators.h"
#include "targets/common/KernelBuilder.h"
#include "targets/common/KernelSpec.h"
#include "targets/common/SwiGlu.h"
#include "targets/common/WarpDot.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace kiln::kernels {

using namespace mlir;

namespace {

// The loop over expert-stage items (warp::warpItemLoop) for `rows` tokens,
// with `e` the expert of the item's choice.
struct ExpertItem : warp::WarpItem {
  Value e;
};
ExpertItem expertItemLoop(ImplicitLocOpBuilder &b, const WarpOfPart &w, Value idx, Value rowsArg,
                          Value perToken, Value groups, ArrayRef<Value> rowSteps) {
  Value rows = arith::IndexCastOp::create(b, b.getIndexType(), rowsArg);
  Value items = arith::MulIOp::create(b, rows, perToken);
  ExpertItem it{warp::warpItemLoop(b, w, items, perToken, groups, rowSteps), Value()};
  it.e = chosenExpert(b, idx, it.t, it.j);
  return it;
}

std::string formatSuffix(bool nvfp4) { return nvfp4 ? "_nvfp4" : "_bf16"; }

// The builder inside `scf.if cond`.
void enterIf(ImplicitLocOpBuilder &b, Value cond) {
  auto branch = scf::IfOp::create(b, cond, /*withElseRegion=*/false);
  b.setInsertionPointToStart(&branch.getThenRegion().front());
}

Value isZero(ImplicitLocOpBuilder &b, Value v, Value zero) {
  return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, v, zero);
}

} // namespace

bool warpGemvFits(int64_t k) { return k % 8 == 0; }
bool warpMoEFits(int64_t intermediate, int64_t latent) {
  return intermediate % 32 == 0 && latent % 32 == 0;
}

KernelSpec linearWarp(int64_t n, int64_t k) {
  std::string name = "linear_warp_" + str(n) + "x" + str(k);
  Tiling tiling;
  tiling.set("kind", "warp-gemv").set("parallel", "n");
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type(), i64 = b.getI64Type();
    return {MemRefType::get({ShapedType::kDynamic, k}, f32),
            MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({ShapedType::kDynamic, n}, f32), i64, i64};
  };
  return buildKernel(name, "kiln.linear", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    Value x = k_.arg(0), w = k_.arg(1), y = k_.arg(2);
    WarpOfPart wp = warpOfPart(k_);
    Value ndim = k_.index(n), rows = k_.argIndex(4), first = k_.argIndex(3);
    auto outs = scf::ForOp::create(b, wp.warp, ndim, wp.warps);
    b.setInsertionPointToStart(outs.getBody());
    Value o = outs.getInductionVar();
    auto tokens = scf::ForOp::create(b, wp.c0, rows, wp.c1);
    b.setInsertionPointToStart(tokens.getBody());
    Value r = tokens.getInductionVar();
    Value xr = arith::AddIOp::create(b, first, r);
    Value dot = warp::rowsDot(b, wp, {warp::Row{w, {o}}}, false, x, xr, k)[0];
    Value sum = warp::warpSum(b, dot);
    enterIf(b, isZero(b, wp.lane, wp.c0));
    memref::StoreOp::create(b, sum, y, ValueRange{r, o});
  });
}

KernelSpec linearWarpTokens(int64_t n, int64_t k, int64_t tokens) {
  // A warp per output row, `tokens` rows of x at a time: each weight load
  // serves them all (batched decode reads the weights once, not per token).
  std::string name = "linear_warp_tokens" + str(tokens) + "_" + str(n) + "x" + str(k);
  Tiling tiling;
  tiling.set("kind", "warp-gemv-tokens").set("parallel", "n").set("tokens", tokens);
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type();
    return {MemRefType::get({ShapedType::kDynamic, k}, f32),
            MemRefType::get({n, k}, b.getBF16Type()),
            MemRefType::get({ShapedType::kDynamic, n}, f32), b.getI64Type()};
  };
  return buildKernel(name, "kiln.linear", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    Value x = k_.arg(0), w = k_.arg(1), y = k_.arg(2);
    WarpOfPart wp = warpOfPart(k_);
    SmallVector<Value> offsets;
    for (int64_t i = 0; i < tokens; ++i)
      offsets.push_back(k_.index(i));
    Value group = k_.index(tokens), ndim = k_.index(n), rows = k_.argIndex(3);
    Value last = arith::SubIOp::create(b, rows, wp.c1);
    Value lead = isZero(b, wp.lane, wp.c0);
    auto outs = scf::ForOp::create(b, wp.warp, ndim, wp.warps);
    b.setInsertionPointToStart(outs.getBody());
    Value o = outs.getInductionVar();
    auto groups = scf::ForOp::create(b, wp.c0, rows, group);
    b.setInsertionPointToStart(groups.getBody());
    SmallVector<Value> at, xr;
    SmallVector<warp::Row> dotRows;
    for (int64_t i = 0; i < tokens; ++i) {
      at.push_back(arith::AddIOp::create(b, groups.getInductionVar(), offsets[i]));
      xr.push_back(arith::MinUIOp::create(b, at.back(), last));
      dotRows.push_back(warp::Row{w, {o}, Value(), Value(), {xr.back()}});
    }
    SmallVector<Value> dots = warp::rowsDot(b, wp, dotRows, false, x, xr[0], k);
    for (int64_t i = 0; i < tokens; ++i) {
      Value sum = warp::warpSum(b, dots[i]);
      Value in = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, at[i], rows);
      OpBuilder::InsertionGuard guard(b);
      enterIf(b, arith::AndIOp::create(b, lead, in));
      memref::StoreOp::create(b, sum, y, ValueRange{at[i], o});
    }
  });
}

bool splitGemvFits(int64_t n, int64_t k) { return n < 4096 && k % 1024 == 0; }
bool wideSplitGemvFits(int64_t n, int64_t k) { return n >= 2048 && k % (256 * kWideSplits) == 0; }

namespace {

// A block of `splits` warps per output row, each warp a 1/splits part of k;
// the parts summed through shared memory in order. With `pair`, two products
// of the same x (weights w0, w1 of one shape, outputs y0, y1): blocks
// [0, n) compute w0's rows, [n, 2n) w1's, each exactly as the single kernel
// (`broken`: w0's again, a fault for the GPU checks).
KernelSpec splitBlockGemv(int64_t n, int64_t k, int64_t splits, bool pair, bool broken) {
  std::string name = std::string(pair ? "linear_split_block_pair_" : "linear_split_block_") +
                     (splits != 4 ? "s" + str(splits) + "_" : "") + (broken ? "broken_" : "") +
                     str(n) + "x" + str(k);
  Tiling tiling;
  tiling.set("kind", "split-k-gemv").set("splits", splits).set("parallel", pair ? "2n" : "n");
  auto args = [&](Builder &b) -> std::vector<Type> {
    Type f32 = b.getF32Type(), i64 = b.getI64Type();
    Type x = MemRefType::get({ShapedType::kDynamic, k}, f32);
    Type w = MemRefType::get({n, k}, b.getBF16Type());
    Type y = MemRefType::get({ShapedType::kDynamic, n}, f32);
    if (pair)
      return {x, w, w, y, y, i64, i64};
    return {x, w, y, i64, i64};
  };
  return buildKernel(name, "kiln.linear", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    const unsigned firstScalar = pair ? 5 : 3;
    Value x = k_.arg(0), w = k_.arg(1), y = k_.arg(pair ? 3 : 2);
    SharedBuffer parts = declareSharedBuffer(k_, name + "_smem", {splits}, b.getF32Type());
    WarpOfPart wp;
    wp.c0 = k_.index(0);
    wp.c1 = k_.index(1);
    wp.c32 = k_.index(32);
    Value part = k_.index(k / splits);
    Value tid = gpu::ThreadIdOp::create(b, gpu::Dimension::x);
    Value o = gpu::BlockIdOp::create(b, gpu::Dimension::x);
    if (pair) {
      // The block's product: w1 and y1 from block n on.
      Value second = arith::CmpIOp::create(b, arith::CmpIPredicate::uge, o, k_.index(n));
      o = arith::SelectOp::create(b, second, arith::SubIOp::create(b, o, k_.index(n)), o);
      w = arith::SelectOp::create(b, second, k_.arg(broken ? 1 : 2), w);
      y = arith::SelectOp::create(b, second, k_.arg(4), y);
    }
    wp.lane = arith::RemUIOp::create(b, tid, wp.c32);
    Value wid = arith::DivUIOp::create(b, tid, wp.c32);
    Value col = arith::MulIOp::create(b, wid, part);
    Value smem = parts.get(b);
    Value rows = k_.argIndex(firstScalar + 1), first = k_.argIndex(firstScalar);
    Value lead = isZero(b, wp.lane, wp.c0), firstThread = isZero(b, tid, wp.c0);
    auto tokens = scf::ForOp::create(b, wp.c0, rows, wp.c1);
    b.setInsertionPointToStart(tokens.getBody());
    Value r = tokens.getInductionVar();
    Value xr = arith::AddIOp::create(b, first, r);
    Value dot = warp::rowsDot(b, wp, {warp::Row{w, {o}}}, false, x, xr, k / splits, col)[0];
    Value partSum = warp::warpSum(b, dot);
    {
      OpBuilder::InsertionGuard guard(b);
      enterIf(b, lead);
      memref::StoreOp::create(b, partSum, smem, ValueRange{wid});
    }
    gpu::BarrierOp::create(b);
    {
      OpBuilder::InsertionGuard guard(b);
      enterIf(b, firstThread);
      SmallVector<Value> p;
      for (int64_t q = 0; q < splits; ++q)
        p.push_back(memref::LoadOp::create(b, smem, ValueRange{k_.index(q)}));
      // In order: ((p0 + p1) + p2) + ...
      Value s = p[0];
      for (int64_t q = 1; q < splits; ++q)
        s = arith::AddFOp::create(b, s, p[q]);
      memref::StoreOp::create(b, s, y, ValueRange{r, o});
    }
    gpu::BarrierOp::create(b);
  });
}

} // namespace

KernelSpec linearSplitBlock(int64_t n, int64_t k, int64_t splits) {
  return splitBlockGemv(n, k, splits, /*pair=*/false, /*broken=*/false);
}

KernelSpec linearSplitBlockPair(int64_t n, int64_t k, bool broken) {
  return splitBlockGemv(n, k, 4, /*pair=*/true, broken);
}

KernelSpec expertGateUpWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                            bool nvfp4) {
  // A warp computes rows o0, o0 + 1 of gate and of up: four weight rows
  // sharing each load of z.
  std::string name = "expert_gateup_warp_" + str(experts) + "e_top" + str(k) + "_" +
                     str(intermediate) + "x" + str(latent) + formatSuffix(nvfp4);
  const ExpertTileShape shape{experts, k, intermediate, latent, nvfp4, 0};
  Tiling tiling;
  tiling.set("kind", "warp-gemv" + formatSuffix(nvfp4))
      .set("parallel", "tokens*experts_per_token*intermediate")
      .set("rows_per_warp", 2);
  auto args = [&](Builder &b) { return expertGateUpArgTypes(b, shape); };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    const unsigned p = projectionArgCount(shape);
    ValueRange all = k_.func.getArguments();
    Value z = all[0], idx = all[1], h = all[2 + 2 * p], rowsArg = all[3 + 2 * p];
    ExpertProjection gate = expertProjection(all, 2, nvfp4);
    ExpertProjection up = expertProjection(all, 2 + p, nvfp4);
    WarpOfPart wp = warpOfPart(k_);
    Value c2 = k_.index(2);
    Value groups = k_.index(intermediate / 2), perToken = k_.index(k * intermediate / 2);
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    ExpertItem it = expertItemLoop(b, wp, idx, rowsArg, perToken, groups, {wp.c0, wp.c1, c2});
    Value gateGlobal = gate.loadGlobal(b, it.e), upGlobal = up.loadGlobal(b, it.e);
    SmallVector<warp::Row> rows = warp::projectionRows(gate, it.e, it.o, gateGlobal);
    rows.append(warp::projectionRows(up, it.e, it.o, upGlobal));
    SmallVector<Value> dots = warp::rowsDot(b, wp, rows, nvfp4, z, it.t, latent);
    SmallVector<Value> sums = warp::warpSums(b, dots);
    enterIf(b, isZero(b, wp.lane, wp.c0));
    // h = silu(gate z) * (up z)
    for (int r = 0; r < 2; ++r)
      memref::StoreOp::create(b, swiGlu(b, sums[r], sums[2 + r], one), h,
                              ValueRange{it.t, it.j, it.o[r]});
  });
}

KernelSpec expertDownWarp(int64_t experts, int64_t k, int64_t intermediate, int64_t latent,
                          bool nvfp4) {
  // A warp computes rows o0 .. o0 + 3: four weight rows sharing each load of h.
  std::string name = "expert_down_warp_" + str(experts) + "e_top" + str(k) + "_" + str(latent) +
                     "x" + str(intermediate) + formatSuffix(nvfp4);
  const ExpertTileShape shape{experts, k, intermediate, latent, nvfp4, 0};
  Tiling tiling;
  tiling.set("kind", "warp-gemv" + formatSuffix(nvfp4))
      .set("parallel", "tokens*experts_per_token*latent")
      .set("rows_per_warp", 4);
  auto args = [&](Builder &b) { return expertDownArgTypes(b, shape); };
  return buildKernel(name, "kiln.megamoe", tiling, args, [&](KernelScope &k_) {
    ImplicitLocOpBuilder &b = k_.b;
    const unsigned p = projectionArgCount(shape);
    ValueRange all = k_.func.getArguments();
    Value h = all[0], idx = all[1], y = all[2 + p], rowsArg = all[3 + p];
    ExpertProjection down = expertProjection(all, 2, nvfp4);
    WarpOfPart wp = warpOfPart(k_);
    Value c2 = k_.index(2), c3 = k_.index(3), c4 = k_.index(4);
    Value groups = k_.index(latent / 4), perToken = k_.index(k * latent / 4);
    ExpertItem it =
        expertItemLoop(b, wp, idx, rowsArg, perToken, groups, {wp.c0, wp.c1, c2, c3, c4});
    Value global = down.loadGlobal(b, it.e);
    SmallVector<Value> dots = warp::rowsDot(b, wp, warp::projectionRows(down, it.e, it.o, global),
                                            nvfp4, h, ValueRange{it.t, it.j}, intermediate);
    SmallVector<Value> sums = warp::warpSums(b, dots);
    enterIf(b, isZero(b, wp.lane, wp.c0));
    for (int r = 0; r < 4; ++r)
      memref::StoreOp::create(b, sums[r], y, ValueRange{it.t, it.j, it.o[r]});
  });
}

} // namespace kiln::kernels
