// The lowering of kiln.megamoe, the fused latent-MoE expert stage: expert
// parallelism's dispatch and combine around it, then one persistent kernel
// that also combines through peer memory, the target's separate expert
// launches (TargetHooks::expertStage), or the generic fused kernel.
#include "targets/common/Lowering.h"

namespace kiln::kernels::lowering {

LogicalResult Lowering::lowerMegaMoE(MegaMoEOp o, StringRef what) {
  Type f32 = b.getF32Type();
  auto gate = llvm::cast<RankedTensorType>(o.getGate().getType());
  int64_t experts = gate.getDimSize(0), inter = gate.getDimSize(1), latent = gate.getDimSize(2);
  int64_t k = llvm::cast<RankedTensorType>(o.getIndices().getType()).getDimSize(1);
  // Expert parallelism: this rank computes its own experts' share of
  // every token (the others' indices become -1, which the expert kernels
  // skip), then the expert group sums the shares. Where the group's ranks
  // hold different tokens (sequence parallelism), each first gathers the
  // group's tokens, their choices and weights, and the sum is scattered back
  // to the tokens' ranks: the dispatch and the combine.
  Buf input = act(o.getInput()), indices = act(o.getIndices()), weights = act(o.getWeights());
  std::optional<int64_t> expertGroup;
  bool dispatch = false;
  if (o.getGridAttr()) {
    FailureOr<int64_t> group = commGroup(o, o.getGridAttr(), *o.getGridAxes());
    if (failed(group))
      return failure();
    expertGroup = *group;
    if (entrySplit > 1) {
      if (groups.all()[*group].size != entrySplit)
        return o.emitOpError() << "spans an expert group of " << groups.all()[*group].size
                               << " ranks while " << entrySplit
                               << " share the tokens: sequence parallelism with expert "
                                  "parallelism needs EP = TP";
      dispatch = true;
      input = gatherTokens(input, *group, what);
      indices = gatherTokens(indices, *group, what);
      weights = gatherTokens(weights, *group, what);
    }
  }
  auto finish = [&](const Buf &y) {
    values[o.getResult()] = dispatch ? scatterTokens(y, *expertGroup, what)
                            : expertGroup
                                ? collective("all_reduce", y, y.shape, *expertGroup, 0, what)
                                : y;
    return success();
  };
  SmallVector<Buf> args = {input, indices, weights};
  bool nvfp4 = bool(o.getGate().getDefiningOp<Nvfp4DequantOp>());
  SmallVector<SmallVector<Buf>> projections; // gate, up, down: 1 or 3 buffers each
  for (Value stack : {o.getGate(), o.getUp(), o.getDown()}) {
    projections.emplace_back();
    auto dequant = stack.getDefiningOp<Nvfp4DequantOp>();
    if (bool(dequant) != nvfp4)
      return o.emitOpError() << "mixes NVFP4 and BF16 expert projections";
    SmallVector<Value> parts =
        nvfp4 ? SmallVector<Value>{dequant.getPacked(), dequant.getScales(), dequant.getGlobal()}
              : SmallVector<Value>{stack};
    for (Value part : parts) {
      FailureOr<Buf> w = weight(part, Transform::None);
      if (failed(w))
        return failure();
      args.push_back(*w);
      projections.back().push_back(*w);
    }
  }
  FailureOr<Buf> pn = weight(o.getPostNorm(), Transform::None);
  if (failed(pn))
    return failure();
  args.push_back(*pn);
  Buf y = alloc({latent}, f32);
  double eps = o.getEps().convertToDouble();
  if (expertGroup && !dispatch && options.peerExchange) {
    // One persistent kernel that also combines across the group.
    int64_t members = groups.all()[*expertGroup].size;
    if (std::optional<TargetHooks::PeerMegaMoE> peer =
            hooks.peerMegaMoE({experts, k, inter, latent, eps, nvfp4, members, maxRows()})) {
      int64_t site = groups.reserveExchange(*expertGroup, peer->siteBytes);
      Buf table = binding("exchange", *expertGroup, {fixed(members)}, b.getI64Type());
      SmallVector<Buf> peerArgs = args;
      peerArgs.push_back(alloc({k, inter}, f32));
      peerArgs.push_back(alloc({k, latent / 4}, f32)); // sums of squares, 4 rows each
      peerArgs.push_back(view(table, table.shape, site));
      peerArgs.push_back(y);
      launch(peer->kernel, peerArgs,
             {"tokens:0", "group:" + std::to_string(*expertGroup), "part", "parts"}, peer->work,
             what);
      values[o.getResult()] = y;
      return success();
    }
  }
  if (expertGroup) {
    // This rank's experts renumbered from 0, the others' -1.
    Buf local = alloc({k}, b.getI32Type());
    launch(localExperts(k, experts), {indices, local},
           {"tokens:0", ("group:" + std::to_string(*expertGroup)), "part", "parts"}, Work{0, 1},
           what);
    indices = local;
    args[1] = local;
  }
  // The stage as separate launches where the target has them.
  int64_t members = expertGroup ? groups.all()[*expertGroup].size : 1;
  if (std::optional<TargetHooks::ExpertStage> stage =
          hooks.expertStage(experts, k, inter, latent, eps, nvfp4, maxRows(), members)) {
    const std::optional<TargetHooks::MatrixExperts> &listed = stage->listed;
    Buf h = listed && listed->rows ? Buf{} : alloc({k, inter}, f32);
    Buf yk = alloc({k, latent}, f32);
    if (listed) {
      // Items grouped by expert, then tiles of an expert's items (prefill)
      // or warps over an expert's rows (batched decode).
      Type i32 = b.getI32Type();
      Buf meta = allocShape({fixed(listed->metaWords)}, i32);
      Buf tiles = allocShape({fixed(listed->tileWords)}, i32);
      Buf items = allocShape({fixed(listed->itemWords)}, i32);
      launch(listed->lists, {indices, meta, tiles, items}, {"tokens:0", "part", "parts"},
             listed->listsWork, what);
      Buf rowsIn = input, hidden = h;
      if (listed->rows) {
        // Rows in tile order, as bf16, through both products.
        Type bf16 = b.getBF16Type();
        plan::DimAttr tileRows = plan::DimAttr::get(ctx, listed->tileRows, k * rowScale, 1);
        rowsIn = allocShape({tileRows, fixed(latent)}, bf16);
        launch(listed->rows->kernel, {input, meta, tiles, items, rowsIn}, {"part", "parts"},
               listed->rows->work, what);
        hidden = allocShape({tileRows, fixed(inter)}, bf16);
      }
      SmallVector<Buf> up = {rowsIn, meta, tiles, items};
      up.append(projections[0]);
      up.append(projections[1]);
      up.push_back(hidden);
      SmallVector<StringRef> upScalars(listed->gateUpScalars.begin(), listed->gateUpScalars.end());
      launch(listed->gateUp, up, upScalars, listed->gateUpWork, what);
      SmallVector<Buf> down = {hidden, meta, tiles, items};
      down.append(projections[2]);
      down.push_back(yk);
      SmallVector<StringRef> downScalars(listed->downScalars.begin(), listed->downScalars.end());
      launch(listed->down, down, downScalars, listed->downWork, what);
    } else {
      // Each (token, choice) item on its own.
      SmallVector<Buf> up = {input, indices};
      up.append(projections[0]);
      up.append(projections[1]);
      up.push_back(h);
      launch(stage->gateUp->kernel, up, {"tokens:0", "part", "parts"}, stage->gateUp->work, what);
      SmallVector<Buf> down = {h, indices};
      down.append(projections[2]);
      down.push_back(yk);
      launch(stage->down->kernel, down, {"tokens:0", "part", "parts"}, stage->down->work, what);
    }
    Buf scales = weights;
    if (stage->scales) {
      scales = alloc({k}, f32);
      launch(stage->scales->kernel, {yk, weights, scales}, {"tokens:0", "part", "parts"},
             stage->scales->work, what);
    }
    launch(stage->combine.kernel, {yk, indices, scales, *pn, y}, {"tokens:0", "part", "parts"},
           stage->combine.work, what);
    return finish(y);
  }
  args.push_back(y);
  launch(megaMoE(experts, k, inter, latent, eps, nvfp4), args, {"tokens:0", "part", "parts"},
         Work{0, 1}, what);
  return finish(y);
}

} // namespace kiln::kernels::lowering
