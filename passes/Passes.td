//===- Passes.td - Kiln graph passes -----------------------*- tablegen -*-===//
//
// Every Kiln pass is declared here and implemented in one <Name>.cpp beside
// this file. Its lit tests live in test/passes/<pass-argument>/.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PASSES_TD
#define KILN_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

def VerifyWeights : Pass<"kiln-verify-weights", "mlir::ModuleOp"> {
  let summary = "Check that checkpoint tensor references agree with each other";
  let description = [{
    Op verifiers see one op; this pass checks what only the whole module shows:
    a checkpoint name (after expanding `{e}` stacks) is used with one type
    only, an expert stack does not overlap a single-expert reference with a
    different shape, and every `kiln.nvfp4_dequant` reads the `weight`,
    `weight_scale` and `weight_scale_2` tensors of one and the same module, as
    ModelOpt names them. The module is left unchanged.
  }];
  let dependentDialects = ["::kiln::KilnDialect"];
}

#endif // KILN_PASSES_TD
