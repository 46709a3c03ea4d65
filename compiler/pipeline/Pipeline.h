// The graph pipeline, in one place: which passes, in which order, for a
// parallel layout. kilnc builds it with buildGraphPipeline; kiln-opt, the
// tests and docs/passes.md name it as the registered pipeline
// `kiln-graph-pipeline{tp=N ep=M sp=true fuse=false split-pooler=false}`.
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

// Adds the pipeline's passes for `layout` (Pipeline.cpp says why that order;
// `kiln-opt --kiln-graph-pipeline=... --dump-pass-pipeline` prints it).
void buildGraphPipeline(mlir::OpPassManager &pm, const Layout &layout);

// Registers `kiln-graph-pipeline` (with the Kiln passes it runs) for
// textual pipelines: kiln-opt, parsePassPipeline. Idempotent.
void registerGraphPipeline();

} // namespace kiln
