//===- PlanOps.td - ops of the plan dialect ----------------*- tablegen -*-===//

#ifndef KILN_PLAN_OPS_TD
#define KILN_PLAN_OPS_TD

include "dialects/plan/PlanDialect.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"

def Plan_DimArrayAttr : TypedArrayAttrBase<Plan_DimAttr, "array of #plan.dim">;

def Plan_EntryOp : Plan_Op<"entry", [Symbol, SingleBlock, NoTerminator,
                                     IsolatedFromAbove]> {
  let summary = "the steps of one entry point";
  let description = [{
    Runs its body top to bottom for a call of T tokens, 1 <= T <= max_tokens.
    `arena_bytes` is set by `plan-assign-offsets`. With `sequences` = N the
    call's token t is a token of conversation t / R of N, R = `sequence_rows`
    (default 1; batched decode: each conversation's next token; batched
    verify: R consecutive tokens of each): it sits at positions[t], and KV
    cache bindings hold all N conversations.
    With `token_split` = S (sequence parallelism) S ranks share a call of
    S * T tokens, T each; the inputs and whole-sequence buffers have S * T
    rows, and "seq:N" scalars count them.

    ```mlir
    plan.entry @decode {max_tokens = 1 : i64} {
      %ids = plan.input 0
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$max_tokens,
                       OptionalAttr<I64Attr>:$sequences,
                       OptionalAttr<I64Attr>:$token_split,
                       OptionalAttr<I64Attr>:$arena_bytes,
                       OptionalAttr<I64Attr>:$sequence_rows);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

def Plan_AllocOp : Plan_Op<"alloc"> {
  let summary = "an activation buffer in the entry point's arena";
  let description = [{
    Lives from its definition to its last use; `plan-assign-offsets` gives it
    a byte `offset` in the arena, reusing the space of buffers already dead.

    ```mlir
    %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<256, 0, 1>] f32 {offset = 0 : i64}
    ```
  }];
  let arguments = (ins Plan_DimArrayAttr:$shape, TypeAttr:$element_type,
                       OptionalAttr<I64Attr>:$offset);
  let results = (outs Plan_BufferType:$buffer);
  let assemblyFormat = "$shape $element_type attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Bytes this buffer needs for `tokens` tokens.
    int64_t bytesFor(int64_t tokens);
  }];
}

def Plan_ViewOp : Plan_Op<"view", [Pure]> {
  let summary = "the same memory with another shape (or a byte offset into it)";
  let description = [{
    Views never move data: `kiln.split_heads` and `kiln.merge_heads` become
    views, as do rows of a buffer.

    ```mlir
    %heads = plan.view %q[0] [#plan.dim<0, 1, 1>, #plan.dim<6, 0, 1>, #plan.dim<32, 0, 1>] f32
    ```
  }];
  let arguments = (ins Plan_BufferType:$source, I64Attr:$byte_offset,
                       Plan_DimArrayAttr:$shape, TypeAttr:$element_type);
  let results = (outs Plan_BufferType:$view);
  let assemblyFormat = "$source `[` $byte_offset `]` $shape $element_type attr-dict";
}

def Plan_BindingOp : Plan_Op<"binding", [Pure]> {
  let summary = "a buffer the runtime provides: weight, KV cache, input or output";
  let description = [{
    `kind` is "weight" (index into the artifact's weight bindings), "kv"
    (cache index / 2, K if even, V if odd), "input" (0 ids, 1 positions) or
    "output" (0 logits), or "exchange" (comm group `index`: its members'
    exchange memory addresses, [members] i64; a plan.view's byte offset
    selects a site within each member's memory).

    ```mlir
    %w = plan.binding "weight" 3 [#plan.dim<256, 0, 1>] bf16
    ```
  }];
  let arguments = (ins StrAttr:$kind, I64Attr:$index, Plan_DimArrayAttr:$shape,
                       TypeAttr:$element_type);
  let results = (outs Plan_BufferType:$buffer);
  let assemblyFormat = "$kind $index $shape $element_type attr-dict";
  let hasVerifier = 1;
}

def Plan_LaunchOp : Plan_Op<"launch"> {
  let summary = "run a kernel on buffers and scalars";
  let description = [{
    Calls `kernel` (a `func.func` of the kernel module) with the buffers in
    order, then the scalars. A scalar is "const:N", "tokens:N" (T + N),
    "past:N" (cached tokens + N), "group:N" (this rank's index in comm group
    N), "seq:N" (the whole sequence's tokens of a split entry + N),
    "tmap:B:X,Y[,...]:S" (GPU: the address of a CUDA tensor map over buffer
    operand B with a box of X x Y x ... elements, innermost first, and a
    shared-memory swizzle of S bytes: 0, 32, 64 or 128), "part" or
    "parts". On a CPU the runtime may
    split the launch into up to `max_parts` concurrent parts; on a GPU it
    launches `grid` blocks (which may grow with T) of `block` threads, and
    kernels have no part/parts scalars.

    ```mlir
    plan.launch @rms_norm_256(%x, %w, %y) scalars ["tokens:0", "part", "parts"] {max_parts = 2 : i64, op = "model.layers.0.input_layernorm"}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$kernel, Variadic<Plan_BufferType>:$buffers,
                       StrArrayAttr:$scalars, I64Attr:$max_parts, StrAttr:$op,
                       OptionalAttr<Plan_DimAttr>:$grid, OptionalAttr<I64Attr>:$block);
  let assemblyFormat = "$kernel `(` $buffers `)` `scalars` $scalars attr-dict";
  let hasVerifier = 1;
}

def Plan_CopyOp : Plan_Op<"copy"> {
  let summary = "copy one buffer into another of the same size";
  let arguments = (ins Plan_BufferType:$source, Plan_BufferType:$destination);
  let assemblyFormat = "$source `to` $destination attr-dict";
}

def Plan_CollectiveOp : Plan_Op<"collective"> {
  let summary = "exchange a buffer with the other ranks of a communication group";
  let description = [{
    Every rank runs the same steps; this one runs among the ranks of this
    rank's group of `comm_groups[group]` (the module's `plan.comm_groups`:
    each a partition of the world, `ranks` listed group after group, each of
    `size` ranks in in-group order). `kind` is "all_reduce" (sum), or
    "all_gather" / "reduce_scatter" along `axis` of the destination / source
    shape. `op` names what it serves, for errors and profiles.

    ```mlir
    // module attributes {plan.comm_groups = [{name = "tp[1]", size = 2,
    //                                         ranks = array<i64: 0, 1>} ]}
    plan.collective "all_reduce" %y to %z group 0 axis 0 {op = "model.layers.0.self_attn"}
    ```
  }];
  let arguments = (ins StrAttr:$kind, Plan_BufferType:$source, Plan_BufferType:$destination,
                       I64Attr:$group, I64Attr:$axis, StrAttr:$op);
  let assemblyFormat = [{
    $kind $source `to` $destination `group` $group `axis` $axis attr-dict
  }];
  let hasVerifier = 1;
}

#endif // KILN_PLAN_OPS_TD
