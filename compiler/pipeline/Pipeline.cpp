#include "compiler/pipeline/Pipeline.h"

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

namespace kiln {

void buildGraphPipeline(mlir::OpPassManager &pm, const Layout &layout) {
  pm.addPass(createVerifyWeights());
  if (layout.devices() > 1)
    pm.addPass(createShard(ShardOptions{layout.tp, layout.ep}));
  if (layout.fuse)
    pm.addPass(createFuseNormResidual());
  if (layout.tp > 1 && !layout.sp && layout.splitPooler)
    pm.addPass(createShardPooler());
  if (layout.fuse)
    pm.addPass(createFormMegaMoE());
  if (layout.sp)
    pm.addPass(createInsertSPCollectives());
}

} // namespace kiln
