//===- KilnOps.td - ops of the kiln graph dialect ----------*- tablegen -*-===//
//
// Every op: a summary, a description with an example, an assembly format and
// a verifier (KilnOps.cpp) that names the operand and the expected shape.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "dialects/kiln/KilnDialect.td"
include "dialects/kiln/KilnAttrs.td"
include "dialects/kiln/KilnInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/SymbolInterfaces.td"

// KilnTraits.h: what passes ask of an op instead of listing op names.
def Kiln_HeadWise : NativeOpTrait<"HeadWise"> {
  let cppNamespace = "::kiln::OpTrait";
}
def Kiln_WholeSequence : NativeOpTrait<"WholeSequence"> {
  let cppNamespace = "::kiln::OpTrait";
}
// The op works token by token: getTokenOperands() in KilnOps.cpp.
def Kiln_TokenWise : DeclareOpInterfaceMethods<Kiln_TokenWiseOpInterface>;

def Kiln_FloatTensor : RankedTensorOf<[AnyFloat]>;
def Kiln_IndexTensor : RankedTensorOf<[I32]>;
// 0 < eps < 1, stored as f64.
def Kiln_EpsAttr : ConfinedAttr<F64Attr, [
    AttrConstraint<CPred<"::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() > 0.0 && "
                         "::llvm::cast<::mlir::FloatAttr>($_self).getValueAsDouble() < 1.0">,
                   "whose value is in (0, 1)">]>;

//===----------------------------------------------------------------------===//
// Checkpoint tensors
//===----------------------------------------------------------------------===//

def Kiln_WeightOp : Kiln_Op<"weight", [Pure]> {
  let summary = "a tensor of the checkpoint, by name";
  let description = [{
    Yields the checkpoint tensor called `name`, with the shape and element type
    it has in the checkpoint (HF layout, `[out, in]` for projections). The
    runtime binds it; the compiler never sees its values.

    A name holding the placeholder `{e}` names one tensor per expert; the
    result stacks them along a new leading dimension, expert `e` at index `e`.
    NVFP4 weights are three such tensors (packed `ui8`, `f8E4M3FN` scales, `f32`
    global scale) joined by `kiln.nvfp4_dequant`.

    ```mlir
    %pool = kiln.weight "model.layers.3.mlp.pooler.weight" : tensor<4096x8192xbf16>
    %gate = kiln.weight "model.layers.3.mlp.experts.{e}.gate_proj.weight"
              : tensor<256x4096x4096xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True when the name carries the `{e}` placeholder (stacked experts).
    bool isExpertStack();
    /// The checkpoint name of one expert's tensor (or the name itself).
    std::string expandedName(int64_t expert);
  }];
}

def Kiln_Nvfp4DequantOp : Kiln_Op<"nvfp4_dequant", [Pure]> {
  let summary = "NVFP4 weight (E2M1 values, E4M3 block scales, f32 global scale) to floats";
  let description = [{
    Decodes an NVFP4 weight stored the ModelOpt way: `packed` holds two E2M1
    values a byte, low nibble first (`[..., out, in/2]`); `scales` holds one
    E4M3 scale per 16 consecutive inputs (`[..., out, in/16]`); `global` holds
    one f32 per matrix (`[...]`, rank 0 for a single matrix). Element
    `(o, i) = e2m1(packed) * e4m3(scales[o, i/16]) * global`. Leading
    dimensions (experts) are shared by all three operands.

    Code generators fuse this into the consuming GEMM (W4A16 on Hopper).

    ```mlir
    %w = kiln.nvfp4_dequant %packed, %scales, %global
           : tensor<16x128x64xui8>, tensor<16x128x8xf8E4M3FN>, tensor<16xf32>
           -> tensor<16x128x128xbf16>
    ```
  }];
  let arguments = (ins RankedTensorOf<[UI8]>:$packed,
                       RankedTensorOf<[F8E4M3FN]>:$scales,
                       RankedTensorOf<[F32]>:$global);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $packed `,` $scales `,` $global attr-dict `:` type($packed) `,` type($scales) `,`
    type($global) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Token embedding and output head
//===----------------------------------------------------------------------===//

def Kiln_EmbedOp : Kiln_Op<"embed", [Pure]> {
  let summary = "embedding lookup: row `ids[t]` of the table";
  let description = [{
    `result[t, :] = table[ids[t], :]`. Ids outside `[0, vocab)` are a runtime
    error, not undefined behaviour.

    ```mlir
    %x = kiln.embed %table, %ids : tensor<1024x256xbf16>, tensor<8xi32> -> tensor<8x256xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$table, Kiln_IndexTensor:$ids);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_LogitsOp : Kiln_Op<"logits", [Pure, Kiln_WholeSequence]> {
  let summary = "output head: fp32 logits over the vocabulary";
  let description = [{
    `result[t, v] = sum_i x[t, i] * head[v, i]`, accumulated and returned in
    f32. With `last_only`, only the last token's row is computed (`[1, V]`),
    which is what generation needs after a prefill.

    ```mlir
    %l = kiln.logits %x, %head : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<8x1024xf32>
    %l1 = kiln.logits %x, %head {last_only} : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<1x1024xf32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$head, UnitAttr:$last_only);
  let results = (outs RankedTensorOf<[F32]>:$result);
  let assemblyFormat = "$input `,` $head attr-dict `:` type($input) `,` type($head) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Norms and elementwise ops
//===----------------------------------------------------------------------===//

def Kiln_RmsNormOp : Kiln_Op<"rms_norm", [Pure, Kiln_TokenWise,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "RMSNorm over the feature dimension";
  let description = [{
    `result[t, :] = x[t, :] / sqrt(mean(x[t, :]^2) + eps) * weight`, computed in
    f32 whatever the storage type. `input` is `[tokens, features]` and `weight`
    is `[features]`.

    ```mlir
    %n = kiln.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight, Kiln_EpsAttr:$eps);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` type($input) `,` type($weight)";
  let hasVerifier = 1;
}

def Kiln_HeadNormOp : Kiln_Op<"head_norm", [Pure, Kiln_HeadWise,
                                             AllTypesMatch<["input", "result"]>]> {
  let summary = "per-head RMSNorm of queries or keys over head_dim";
  let description = [{
    RMSNorm of every `[t, h, :]` vector of a `[tokens, heads, head_dim]`
    tensor with one shared weight of width `head_dim` (the model's `q_norm` and
    `k_norm`), applied before the rotary embedding.

    ```mlir
    %qn = kiln.head_norm %q, %w {eps = 1.0e-05 : f64} : tensor<8x6x32xbf16>, tensor<32xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight, Kiln_EpsAttr:$eps);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` type($input) `,` type($weight)";
  let hasVerifier = 1;
}

class Kiln_BroadcastBinaryOp<string mnemonic, string formula>
    : Kiln_Op<mnemonic, [Pure, Kiln_TokenWise, AllTypesMatch<["lhs", "result"]>]> {
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
  let hasVerifier = 1;
  let description = [{
    Elementwise }] # formula # [{. `rhs` has the shape of `lhs` or of a suffix
    of it, and is then broadcast over the leading dimensions (a per-channel
    vector over `[tokens, features]`). Both have the same element type.

    ```mlir
    %r = kiln.}] # mnemonic # [{ %x, %gate : tensor<8x256xbf16>, tensor<256xbf16>
    ```
  }];
}

def Kiln_MulOp : Kiln_BroadcastBinaryOp<"mul", "`lhs * rhs`"> {
  let summary = "elementwise product, rhs broadcast over leading dimensions";
}

def Kiln_AddOp : Kiln_BroadcastBinaryOp<"add", "`lhs + rhs`"> {
  let summary = "elementwise sum, rhs broadcast over leading dimensions";
}

//===----------------------------------------------------------------------===//
// Projections
//===----------------------------------------------------------------------===//

def Kiln_LinearOp : Kiln_Op<"linear", [Pure, Kiln_TokenWise]> {
  let summary = "x · Wᵀ with an [out, in] weight";
  let description = [{
    `result[t, o] = sum_i x[t, i] * weight[o, i]`, accumulated in f32 and
    stored in the result's element type (f32 for router logits).

    ```mlir
    %q = kiln.linear %x, %wq : tensor<8x256xbf16>, tensor<192x256xbf16> -> tensor<8x192xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Kiln_SplitHeadsOp : Kiln_Op<"split_heads", [Pure, Kiln_HeadWise]> {
  let summary = "view [tokens, heads*head_dim] as [tokens, heads, head_dim]";
  let description = [{
    A reshape with a meaning: feature `h * head_dim + d` becomes `[h, d]`.

    ```mlir
    %q3 = kiln.split_heads %q : tensor<8x192xbf16> -> tensor<8x6x32xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_MergeHeadsOp : Kiln_Op<"merge_heads", [Pure, Kiln_WholeSequence]> {
  let summary = "view [tokens, heads, head_dim] as [tokens, heads*head_dim]";
  let description = [{
    The inverse of `kiln.split_heads`: concatenates the heads of each token.

    ```mlir
    %a2 = kiln.merge_heads %a : tensor<8x6x32xbf16> -> tensor<8x192xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Kiln_RopeOp : Kiln_Op<"rope", [Pure, Kiln_HeadWise, AllTypesMatch<["input", "result"]>]> {
  let summary = "rotary position embedding (NeoX rotate-half, full head_dim)";
  let description = [{
    For a `[tokens, heads, D]` input and token positions `p`, with
    `f_j = theta^(-2j/D)` for `j < D/2`: `out[j] = x[j] cos(p f_j) - x[j + D/2]
    sin(p f_j)` and `out[j + D/2] = x[j + D/2] cos(p f_j) + x[j] sin(p f_j)`.

    ```mlir
    %qr = kiln.rope %q, %pos {theta = 1.0e+07 : f64} : tensor<8x6x32xbf16>, tensor<8xi32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_IndexTensor:$positions, F64Attr:$theta);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $positions attr-dict `:` type($input) `,` type($positions)";
  let hasVerifier = 1;
}

def Kiln_AttentionOp : Kiln_Op<"attention", [Pure, Kiln_WholeSequence]> {
  let summary = "causal grouped-query attention, optionally within a sliding window";
  let description = [{
    Scaled dot-product attention of `q` (`[T, Hq, D]`) over `k` and `v`
    (`[T, Hkv, D]` and `[T, Hkv, Dv]`) of the same T tokens, whose positions
    are `positions` (`[T]`). Query head `h` reads KV head `h / (Hq / Hkv)`.
    Query `t` sees key `j` iff `positions[j] <= positions[t]` and, when
    `window` is set, `positions[t] - window < positions[j]`. Scores are
    multiplied by `scale` (the model uses `1/sqrt(D)`); softmax in f32.

    `kv_type` is the element type the KV cache stores (`f32`, `bf16` or
    `f8E4M3FN`; none: exact): every key and value, the call's own and the
    cached ones alike, is rounded to it before the products, so that attention
    reads the same keys whether a position was cached or computed in the same
    call (a prompt gives the same result in one call or in chunks).

    An FP8 cache has one scale per tensor, `kv_scales = array<f64: k, v>` (1
    and 1 without it): a key `x` is held as the e4m3 code of `x / k` (rounded
    to nearest even, saturated at 448) and read back as that code times `k`;
    values likewise with `v`. Only an FP8 cache takes scales.

    ```mlir
    %a = kiln.attention %q, %k, %v, %pos {kv_type = bf16, scale = 0.17677669529663687 : f64, window = 8 : i64}
           : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32>
           -> tensor<8x6x32xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$q, Kiln_FloatTensor:$k, Kiln_FloatTensor:$v,
                       Kiln_IndexTensor:$positions, F64Attr:$scale,
                       OptionalAttr<I64Attr>:$window, OptionalAttr<TypeAttr>:$kv_type,
                       OptionalAttr<DenseF64ArrayAttr>:$kv_scales);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $positions attr-dict `:` type($q) `,` type($k) `,` type($v) `,`
    type($positions) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Latent mixture of experts
//===----------------------------------------------------------------------===//

def Kiln_RouterTopKOp : Kiln_Op<"router_topk", [Pure, Kiln_TokenWise]> {
  let summary = "softmax router: top-k experts per token, renormalised weights";
  let description = [{
    For router logits `[T, E]`: `p = softmax(logits)` in f32, the `k` experts
    of largest `p` (ties go to the lower index, in decreasing order of `p`),
    and their probabilities renormalised to sum to 1. Returns the weights
    (`[T, k]`, f32) and the expert indices (`[T, k]`, i32).

    ```mlir
    %w, %idx = kiln.router_topk %logits {k = 4 : i64}
                 : tensor<8x16xf32> -> tensor<8x4xf32>, tensor<8x4xi32>
    ```
  }];
  let arguments = (ins RankedTensorOf<[F32]>:$logits, I64Attr:$k);
  let results = (outs RankedTensorOf<[F32]>:$weights, Kiln_IndexTensor:$indices);
  let assemblyFormat = "$logits attr-dict `:` type($logits) `->` type($weights) `,` type($indices)";
  let hasVerifier = 1;
}

def Kiln_ExpertSwiGLUOp : Kiln_Op<"expert_swiglu", [Pure, Kiln_TokenWise]> {
  let summary = "grouped SwiGLU MLP of each token's selected experts";
  let description = [{
    For latent input `z` (`[T, Lt]`) and selected experts `indices` (`[T, k]`),
    with stacked expert weights `gate`, `up` (`[E, I, Lt]`) and `down`
    (`[E, Lt, I]`): `result[t, j] = down_e(silu(gate_e z_t) * up_e z_t)` where
    `e = indices[t, j]`. One output row per (token, slot): the weighting and
    the combine are separate ops (`kiln.expert_norm`, `kiln.combine`).

    ```mlir
    %y = kiln.expert_swiglu %z, %idx, %gate, %up, %down
           : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<16x128x128xbf16>,
             tensor<16x128x128xbf16>, tensor<16x128x128xbf16> -> tensor<8x4x128xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_IndexTensor:$indices,
                       Kiln_FloatTensor:$gate, Kiln_FloatTensor:$up, Kiln_FloatTensor:$down);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $gate `,` $up `,` $down attr-dict `:` type($input) `,`
    type($indices) `,` type($gate) `,` type($up) `,` type($down) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Kiln_ExpertNormOp : Kiln_Op<"expert_norm", [Pure, Kiln_TokenWise,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "per-expert RMSNorm of each selected expert's output";
  let description = [{
    `result[t, j] = RMSNorm(input[t, j]; weight[indices[t, j]])`: each expert
    has its own norm weight (`[E, Lt]`). The model applies it to every expert's
    output before the weighted combine; normalising the sum instead is a
    different model.

    ```mlir
    %yn = kiln.expert_norm %y, %idx, %w {eps = 1.0e-05 : f64}
            : tensor<8x4x128xbf16>, tensor<8x4xi32>, tensor<16x128xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_IndexTensor:$indices,
                       Kiln_FloatTensor:$weight, Kiln_EpsAttr:$eps);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $weight attr-dict `:` type($input) `,` type($indices) `,` type($weight)
  }];
  let hasVerifier = 1;
}

def Kiln_CombineOp : Kiln_Op<"combine", [Pure, Kiln_TokenWise]> {
  let summary = "weighted sum of each token's expert outputs, in f32";
  let description = [{
    `result[t] = sum_j weights[t, j] * input[t, j]`, accumulated in f32.

    ```mlir
    %s = kiln.combine %yn, %w : tensor<8x4x128xbf16>, tensor<8x4xf32> -> tensor<8x128xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, RankedTensorOf<[F32]>:$weights);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weights attr-dict `:` type($input) `,` type($weights) `->` type($result)";
  let hasVerifier = 1;
}


//===----------------------------------------------------------------------===//
// Fused ops (formed by passes/)
//===----------------------------------------------------------------------===//

def Kiln_NormResidualOp : Kiln_Op<"norm_residual", [Pure, Kiln_TokenWise,
    AllTypesMatch<["residual", "update", "new_residual", "normed"]>]> {
  let summary = "post-norm, gated residual add and the next norm, as one op";
  let description = [{
    The sandwich-norm boundary of Muse Spark in one op (seed 001, "fused
    elementwise chain"):

    ```
    new_residual = residual + gate * RMSNorm(update; post_weight)
    normed       = RMSNorm(new_residual; next_weight)
    ```

    Formed by `kiln-fuse-norm-residual` at the attention → MoE boundary
    (post-attention norm, attention gate, pre-feedforward norm) and at the
    layer boundary (post-feedforward norm, MoE gate, next layer's input norm
    or the final norm).

    ```mlir
    %h, %u = kiln.norm_residual %x, %o, %post, %gate, %next {post_eps = 1.0e-05 : f64, next_eps = 1.0e-05 : f64}
               : tensor<8x256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<256xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$residual, Kiln_FloatTensor:$update,
                       Kiln_FloatTensor:$post_weight, Kiln_FloatTensor:$gate,
                       Kiln_FloatTensor:$next_weight, Kiln_EpsAttr:$post_eps,
                       Kiln_EpsAttr:$next_eps);
  let results = (outs Kiln_FloatTensor:$new_residual, Kiln_FloatTensor:$normed);
  let assemblyFormat = [{
    $residual `,` $update `,` $post_weight `,` $gate `,` $next_weight attr-dict `:`
    type($residual) `,` type($post_weight) `,` type($gate) `,` type($next_weight)
  }];
  let hasVerifier = 1;
}

def Kiln_HeadNormRopeOp : Kiln_Op<"head_norm_rope", [Pure, Kiln_HeadWise,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "per-head RMSNorm then rotary embedding, as one op";
  let description = [{
    `kiln.rope(kiln.head_norm(input, weight; eps), positions; theta)`: the
    query or key path between its projection and attention, in one pass over
    each `[t, h, :]` vector. Formed by `kiln-fuse-head-norm-rope`; a target
    builds its kernel by composing the two ops' row stages
    (`targets/common/HeadRowKernels.h`).

    ```mlir
    %qr = kiln.head_norm_rope %q, %w, %pos {eps = 1.0e-05 : f64, theta = 1.0e+07 : f64}
            : tensor<8x6x32xbf16>, tensor<32xbf16>, tensor<8xi32>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_FloatTensor:$weight,
                       Kiln_IndexTensor:$positions, Kiln_EpsAttr:$eps, F64Attr:$theta);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $positions attr-dict `:` type($input) `,` type($weight) `,`
    type($positions)
  }];
  let hasVerifier = 1;
}

def Kiln_LocalExpertsOp : Kiln_Op<"local_experts", [Pure, Kiln_TokenWise,
    AllTypesMatch<["indices", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "renumber selected experts to this rank's block, -1 for the others";
  let description = [{
    Expert parallelism: the `num_experts` experts are split into equal
    contiguous blocks over the device group of `grid` along `grid_axes` (the
    shard dialect's groups); the member with in-group index `g` holds experts
    `[g * E/G, (g + 1) * E/G)`. Each index of this rank's block becomes its
    local number `e - g * E/G`; every other index becomes -1, which the
    expert ops treat as "not here" (a zero row).

    ```mlir
    shard.grid @ep(shape = 1x2)
    %local = kiln.local_experts %idx on @ep grid_axes = [1] {num_experts = 16 : i64}
               : tensor<8x4xi32>
    ```
  }];
  let arguments = (ins Kiln_IndexTensor:$indices, FlatSymbolRefAttr:$grid,
                       DenseI16ArrayAttr:$grid_axes, I64Attr:$num_experts);
  let results = (outs Kiln_IndexTensor:$result);
  let assemblyFormat = [{
    $indices `on` $grid `grid_axes` `=` $grid_axes attr-dict `:` type($indices)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Devices in one expert group (the product of the listed grid axes), or
    /// failure when the grid is missing.
    ::mlir::FailureOr<int64_t> groupSize();
  }];
}

def Kiln_MegaMoEOp : Kiln_Op<"megamoe", [Pure, Kiln_TokenWise,
    AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the whole expert stage: dispatch, SwiGLU experts, per-expert norm, combine";
  let description = [{
    One op for everything between the router and the unpooler, the unit the
    MegaMoE megakernel implements (seed 001):

    ```
    result[t] = sum_j weights[t, j] * RMSNorm(down_e(silu(gate_e z_t) * up_e z_t); post_norm_e)
                with e = indices[t, j]
    ```

    Without `grid`, the stacks hold all `num_experts` experts. With `grid`
    and `grid_axes` (expert parallelism), each member of the device group
    holds one contiguous block of `E/G` experts (as `kiln.local_experts`
    numbers them) and `indices` are global: every token's selected experts
    are reached on whichever rank holds them (the dispatch), and each rank
    receives the complete output for its own tokens (the combine). Ranks may
    hold the same tokens (TP) or different ones (SP): the result is each
    rank's tokens' MoE output either way.

    ```mlir
    %m = kiln.megamoe %z, %idx, %w, %gate, %up, %down, %pn on @ep grid_axes = [1]
           {eps = 1.0e-05 : f64, num_experts = 16 : i64}
           : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<8x4xf32>, tensor<8x128x128xbf16>,
             tensor<8x128x128xbf16>, tensor<8x128x128xbf16>, tensor<8x128xbf16>
    ```
  }];
  let arguments = (ins Kiln_FloatTensor:$input, Kiln_IndexTensor:$indices,
                       RankedTensorOf<[F32]>:$weights, Kiln_FloatTensor:$gate,
                       Kiln_FloatTensor:$up, Kiln_FloatTensor:$down,
                       Kiln_FloatTensor:$post_norm, Kiln_EpsAttr:$eps, I64Attr:$num_experts,
                       OptionalAttr<FlatSymbolRefAttr>:$grid,
                       OptionalAttr<DenseI16ArrayAttr>:$grid_axes);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $indices `,` $weights `,` $gate `,` $up `,` $down `,` $post_norm
    (`on` $grid^ `grid_axes` `=` $grid_axes)? attr-dict `:` type($input) `,` type($indices) `,`
    type($weights) `,` type($gate) `,` type($up) `,` type($down) `,` type($post_norm)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Devices the experts are spread over (1 without a grid).
    ::mlir::FailureOr<int64_t> groupSize();
  }];
}

#endif // KILN_OPS_TD
