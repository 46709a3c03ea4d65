// The graph the end-to-end tests compile and interpret: a model's forward
// with a dynamic token count and the last token's logits, as kilnc builds
// it for a target, optionally after the graph pipeline.
#pragma once

#include "compiler/pipeline/Pipeline.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "models/muse_spark/GraphBuilder.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

namespace kiln::e2e {

inline void loadDialects(mlir::MLIRContext &context) {
  context.loadDialect<KilnDialect, plan::PlanDialect, mlir::func::FuncDialect,
                      mlir::shard::ShardDialect>();
}

// `pipeline`: after the graph pipeline (`fuse`: with its fusions), as the
// compiler takes it; else as built, as the interpreter runs it.
inline mlir::OwningOpRef<mlir::ModuleOp> forwardGraph(mlir::MLIRContext &context,
                                                      const muse_spark::Config &config,
                                                      muse_spark::WeightFormat format,
                                                      bool pipeline, bool fuse = true) {
  muse_spark::GraphOptions options;
  options.tokens = mlir::ShapedType::kDynamic;
  options.format = format;
  options.lastTokenLogits = true;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      muse_spark::buildForwardGraph(context, config, options);
  if (pipeline) {
    mlir::PassManager pm(&context);
    Layout layout;
    layout.fuse = fuse;
    buildGraphPipeline(pm, layout);
    EXPECT_TRUE(mlir::succeeded(pm.run(*module)));
  }
  return module;
}

} // namespace kiln::e2e
