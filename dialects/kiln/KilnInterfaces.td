//===- KilnInterfaces.td - what passes ask of kiln ops -----*- tablegen -*-===//
//
// Op interfaces through which passes learn what an op does instead of
// listing op names, so that a new op declares it once (KilnTraits.h holds the
// traits that need no method).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_INTERFACES_TD
#define KILN_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Kiln_TokenWiseOpInterface : OpInterface<"TokenWiseOp"> {
  let description = [{
    The op works on each token on its own: its results' dimension 0 is the
    token dimension, and so is that of the operands it names. Under sequence
    parallelism (kiln-insert-sp-collectives) such an op runs on each rank's
    token shard: the named operands are sliced to it, the others (weights,
    per-channel vectors) stay whole.
  }];
  let cppNamespace = "::kiln";
  let methods = [
    InterfaceMethod<[{
        The operands whose dimension 0 is the token dimension.
      }],
      "::llvm::SmallVector<::mlir::OpOperand *>", "getTokenOperands">,
  ];
}

#endif // KILN_INTERFACES_TD
