//===- PlanDialect.td - the plan dialect -------------------*- tablegen -*-===//
//
// What the runtime does, in order: buffers, kernel launches, copies and
// collectives, per entry point. The last IR before the artifact.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PLAN_DIALECT_TD
#define KILN_PLAN_DIALECT_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/OpBase.td"

def Plan_Dialect : Dialect {
  let name = "plan";
  let cppNamespace = "::kiln::plan";
  let summary = "Execution plans: buffers, launches, copies, collectives";
  let description = [{
    A `plan.entry` holds the steps of one entry point (`prefill`, `decode`) in
    the order the runtime runs them. Buffers are SSA values of type
    `!plan.buffer`: activations (`plan.alloc`, placed in one arena by
    `plan-assign-offsets`), bound weights, KV caches, the inputs and the
    logits output. Sizes may depend on the call's token count T: each
    dimension is a `#plan.dim<constant, per_token, align>`, evaluated as
    round_up(constant + per_token * T, align). Launches name a kernel of the
    kernel module by symbol; `kilnc` serialises all of it into the artifact
    (docs/runtime-abi.md).
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Plan_Op<string mnemonic, list<Trait> traits = []>
    : Op<Plan_Dialect, mnemonic, traits>;

def Plan_DimAttr : AttrDef<Plan_Dialect, "Dim"> {
  let mnemonic = "dim";
  let summary = "a size: round_up(constant + per_token * T, align)";
  let parameters = (ins "int64_t":$constant, "int64_t":$per_token, "int64_t":$align);
  let assemblyFormat = "`<` $constant `,` $per_token `,` $align `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The size for `tokens` tokens.
    int64_t evaluate(int64_t tokens) const;
  }];
}

def Plan_BufferType : TypeDef<Plan_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "a region of memory the runtime provides";
}

#endif // KILN_PLAN_DIALECT_TD
