// The graph pipeline kilnc runs, in one place: which passes, in which order,
// for a parallel layout.
#pragma once

#include <cstdint>

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace kiln {

struct Layout {
  int64_t tp = 1;   // tensor-parallel ranks (attention)
  int64_t ep = 1;   // expert-parallel ranks (MoE)
  bool sp = false;  // sequence parallelism over the TP group
  bool fuse = true; // norm/residual and MegaMoE fusion (off: every op stays as built)
  // Split the pooler over TP (kiln-shard-pooler) where SP allows it. Off for
  // a target's non-SP graph beside an SP one: both entries then bind the
  // same whole pooler instead of a sliced copy as well.
  bool splitPooler = true;
  int64_t devices() const { return tp > ep ? tp : ep; }
};

// verify-weights ▸ shard (TP/EP) ▸ fuse-norm-residual ▸ shard-pooler (plain
// TP only: under SP the pooler runs on token shards) ▸ form-megamoe ▸
// insert-sp-collectives (SP only). MegaMoE is formed before SP because the
// unfused expert-parallel stage assumes every rank holds the same tokens.
void buildGraphPipeline(mlir::OpPassManager &pm, const Layout &layout);

} // namespace kiln
