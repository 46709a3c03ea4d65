//===- KilnDialect.td - the kiln graph dialect -------------*- tablegen -*-===//
//
// The dialect a model author reads: value-semantics tensor ops that carry the
// model's meaning (an attention with its window, a router with its top-k, the
// latent MoE's expert stage) rather than loops.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_TD
#define KILN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Graph-level ops of mixture-of-experts language models";
  let description = [{
    The `kiln` dialect describes one forward pass of a decoder-only
    mixture-of-experts model as a dataflow graph of tensor ops with value
    semantics. Checkpoint tensors enter through `kiln.weight`, named exactly as
    the checkpoint names them. Ops are decomposed finely enough that the
    fusion passes (norm/residual fusion, MegaMoE formation) have real patterns
    to match, and coarse enough that each op still reads as a step of the
    model card: `kiln.attention {window = 2048}`, `kiln.router_topk {k = 8}`.

    Conventions: activations are `[tokens, features]` or, inside attention,
    `[tokens, heads, head_dim]`; linear weights are `[out, in]` (HF layout);
    expert weights are stacked along a leading expert dimension.

    The module carries the model's name (`kiln.model`), its checkpoint format
    (`kiln.weight_format = #kiln.weight_format<nvfp4>`) and, once sharded, its
    parallel layout (`kiln.layout = #kiln.layout<tp = 2, ep = 2>`); the
    dialect verifies their types.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_DIALECT_TD
