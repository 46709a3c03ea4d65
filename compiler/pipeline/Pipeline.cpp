#include "compiler/pipeline/Pipeline.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

namespace kiln {

// verify-weights ▸ shard (TP/EP) ▸ fuse-norm-residual ▸ fuse-head-norm-rope ▸
// shard-pooler (plain TP only: under SP the pooler runs on token shards) ▸
// form-megamoe ▸
// insert-sp-collectives (SP only). MegaMoE is formed before SP because the
// unfused expert-parallel stage assumes every rank holds the same tokens.
void buildGraphPipeline(mlir::OpPassManager &pm, const Layout &layout) {
  pm.addPass(createVerifyWeights());
  if (layout.devices() > 1)
    pm.addPass(createShard(ShardOptions{layout.tp, layout.ep}));
  if (layout.fuse) {
    pm.addPass(createFuseNormResidual());
    pm.addPass(createFuseHeadNormRope());
  }
  if (layout.tp > 1 && !layout.sp && layout.splitPooler)
    pm.addPass(createShardPooler());
  if (layout.fuse)
    pm.addPass(createFormMegaMoE());
  if (layout.sp)
    pm.addPass(createInsertSPCollectives());
}

namespace {

struct GraphPipelineOptions : public mlir::PassPipelineOptions<GraphPipelineOptions> {
  Option<int64_t> tp{*this, "tp", llvm::cl::desc("Tensor-parallel ranks"), llvm::cl::init(1)};
  Option<int64_t> ep{*this, "ep", llvm::cl::desc("Expert-parallel ranks"), llvm::cl::init(1)};
  Option<bool> sp{*this, "sp", llvm::cl::desc("Sequence parallelism over the TP group"),
                  llvm::cl::init(false)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Norm/residual, head-norm/rope and MegaMoE fusion"),
                    llvm::cl::init(true)};
  Option<bool> splitPooler{*this, "split-pooler",
                           llvm::cl::desc("Split the pooler over TP where SP allows it"),
                           llvm::cl::init(true)};
};

} // namespace

void registerGraphPipeline() {
  registerKilnPasses();
  // Once: the registry refuses a second pipeline of the same name.
  static bool registered = false;
  if (registered)
    return;
  registered = true;
  mlir::PassPipelineRegistration<GraphPipelineOptions>(
      "kiln-graph-pipeline",
      "The graph pipeline kilnc runs for a parallel layout (compiler/pipeline/Pipeline.h)",
      [](mlir::OpPassManager &pm, const GraphPipelineOptions &options) {
        Layout layout;
        layout.tp = options.tp;
        layout.ep = options.ep;
        layout.sp = options.sp;
        layout.fuse = options.fuse;
        layout.splitPooler = options.splitPooler;
        buildGraphPipeline(pm, layout);
      });
}

} // namespace kiln
