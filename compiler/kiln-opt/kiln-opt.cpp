// kiln-opt: mlir-opt with the Kiln dialects and passes registered. Reads IR,
// runs the passes named on the command line, prints the result; lit tests
// drive every pass through it.
#include "compiler/pipeline/Pipeline.h"
#include "dialects/kiln/KilnDialect.h"
#include "dialects/plan/PlanDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  // Collectives and shardings are upstream shard ops.
  registry.insert<kiln::KilnDialect, kiln::plan::PlanDialect, mlir::func::FuncDialect,
                  mlir::shard::ShardDialect>();
  // Every Kiln pass, and the graph pipeline kilnc runs.
  kiln::registerGraphPipeline();
  // Upstream cleanups that Kiln pipelines use between passes.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerSymbolDCEPass();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "Kiln optimizer driver: runs Kiln passes on kiln graph IR\n", registry));
}
