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


//===----------------------------------------------------------------------===//
// Parallel layouts
//===----------------------------------------------------------------------===//

def Shard : Pass<"kiln-shard", "mlir::ModuleOp"> {
  let summary = "Split attention heads over TP ranks and experts over EP ranks";
  let description = [{
    Turns the single-device graph into one SPMD program for max(TP, EP)
    devices (grids @tp and @ep, see passes/Sharding.h):

    - q_proj and o_proj are column- and row-parallel over the TP group:
      each rank keeps Hq/TP query heads, and the o_proj partial sums meet in
      a `shard.all_reduce`.
    - k_proj and v_proj are split the same way while TP divides the KV heads;
      when TP exceeds them, each KV head is replicated on the TP/Hkv ranks
      whose query heads read it.
    - The expert stacks (and their NVFP4 parts) are split over the EP group;
      `kiln.local_experts` renumbers each token's choices to the rank's block,
      and the combined expert output is summed over the EP group.
    - The output head is vocabulary-parallel over the TP group (where TP
      divides the vocabulary): each rank computes its share of the logits,
      and a `shard.all_gather` joins them.
    - The router, norms, pooler and unpooler stay replicated.

    Checkpoint tensors keep their full type; `shard.all_slice` says which
    piece a rank keeps, so a runtime loads only that piece. The module gets
    `kiln.layout = #kiln.layout<tp = .., ep = ..>`.

    ```
    kiln-opt --kiln-shard="tp=2 ep=2" graph.mlir
    ```
  }];
  let options = [
    Option<"tp", "tp", "int64_t", "1", "Tensor-parallel ranks for attention">,
    Option<"ep", "ep", "int64_t", "1", "Expert-parallel ranks for the MoE">,
  ];
  let statistics = [
    Statistic<"numSlicedTensors", "sliced-tensors", "Weights split across ranks">,
    Statistic<"numCollectives", "collectives", "Collectives inserted">,
  ];
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::shard::ShardDialect"];
}

def ShardPooler : Pass<"kiln-shard-pooler", "mlir::ModuleOp"> {
  let summary = "Split the replicated pooler and unpooler over the TP group";
  let description = [{
    After `kiln-shard`, the latent MoE's pooler (`H -> latent`) and unpooler
    (`latent -> H`) are still replicated: every TP rank computes the same
    product. This pass gives each rank a slice of their output features and
    assembles the full result with a `shard.all_gather`:

    ```mlir
    %w = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<128x256xbf16>
    %ws = shard.all_slice %w on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<128x256xbf16> -> tensor<64x256xbf16>
    %zs = kiln.linear %u, %ws : tensor<8x256xbf16>, tensor<64x256xbf16> -> tensor<8x64xbf16>
    %z = shard.all_gather %zs on @tp grid_axes = [1, 2] gather_axis = 1 : tensor<8x64xbf16> -> tensor<8x128xbf16>
    ```

    The linears are found by structure (the one behind the expert input norm,
    the one reading the combined expert output), not by name. Without a @tp
    grid the pass does nothing. Under sequence parallelism the pooler runs on
    token shards instead; `kiln-insert-sp-collectives` refuses IR this pass
    has split.
  }];
  let statistics = [
    Statistic<"numSplit", "split-projections", "Pooler and unpooler linears split over TP">,
  ];
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::shard::ShardDialect"];
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def FuseNormResidual : Pass<"kiln-fuse-norm-residual", "mlir::ModuleOp"> {
  let summary = "Fuse post-norm, gated residual add and the next norm into kiln.norm_residual";
  let description = [{
    Muse Spark's sandwich norm ends every half-layer with

    ```mlir
    %n = kiln.rms_norm %update, %post_w {eps = a}
    %g = kiln.mul %n, %gate                 // per-channel gate vector
    %h = kiln.add %residual, %g             // or kiln.add %g, %residual
    %y = kiln.rms_norm %h, %next_w {eps = b}
    ```

    which this pass turns into one op, the "fused elementwise chain":

    ```mlir
    %h2, %y2 = kiln.norm_residual %residual, %update, %post_w, %gate, %next_w
                 {post_eps = a, next_eps = b}
    ```

    Every use of `%h` (the residual stream goes on) reads `%h2` and every use
    of `%y` reads `%y2`. It fires at the attention → MoE boundary
    (post_attention_layernorm, attn_residual_gate, pre_feedforward_layernorm)
    and at each layer boundary (post_feedforward_layernorm, mlp_residual_gate,
    the next input_layernorm or model.norm).

    The four ops must lie in one block; `%n` and `%g` must have no other use;
    `%residual` and `%update` must have one rank-2 type; the gate must be a
    rank-1 vector (a full `[tokens, hidden]` multiplier has no place in
    kiln.norm_residual and is left alone). When `%h` feeds several
    kiln.rms_norm ops, the first in block order is fused and the others read
    `%h2`. The chains are visited in program order, so the result does not
    depend on anything but the input. Sharded IR (an `update` that is a
    `shard.all_reduce`) fuses the same way.

    ```
    kiln-opt --kiln-fuse-norm-residual graph.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-chains", "Norm / gate / add / norm chains fused">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}


def FuseHeadNormRope : Pass<"kiln-fuse-head-norm-rope", "mlir::ModuleOp"> {
  let summary = "Fuse a per-head RMSNorm and the rotary embedding after it into kiln.head_norm_rope";
  let description = [{
    Muse Spark normalises each query and key head before rotating it:

    ```mlir
    %n = kiln.head_norm %q, %w {eps = a}
    %r = kiln.rope %n, %pos {theta = b}
    ```

    becomes

    ```mlir
    %r2 = kiln.head_norm_rope %q, %w, %pos {eps = a, theta = b}
    ```

    so that each head is read and written once instead of twice. `%n` must
    have no other use and both ops must lie in one block. The fused op keeps
    the HeadWise trait, so `kiln-shard` and `kiln-insert-sp-collectives` treat
    it as they treat the two ops.

    ```
    kiln-opt --kiln-fuse-head-norm-rope graph.mlir
    ```
  }];
  let statistics = [
    Statistic<"numFused", "fused-pairs", "head_norm / rope pairs fused">,
  ];
  let dependentDialects = ["::kiln::KilnDialect"];
}

def FormMegaMoE : Pass<"kiln-form-megamoe", "mlir::ModuleOp"> {
  let summary = "Fuse the expert stage into one kiln.megamoe op";
  let description = [{
    `kiln.expert_swiglu` -> `kiln.expert_norm` -> `kiln.combine` on the same
    expert choices becomes one `kiln.megamoe`. Under expert parallelism (the
    form `kiln-shard` leaves: `kiln.local_experts` before, a sum over the
    same expert group after) the op takes the global expert ids and carries
    the grid, so that it stands for the dispatch of each token to the rank
    holding its expert and the combine back to the token's rank:

    ```mlir
    %m = kiln.megamoe %z, %idx, %w, %gate, %up, %down, %post on @ep grid_axes = [1]
           {eps = 1.0e-05 : f64, num_experts = 16 : i64} : ...
    ```

    A chain whose pieces have other users, or whose combine is not summed
    over the expert group it was split over, is left alone.
  }];
  let statistics = [
    Statistic<"numFormed", "megamoe-ops", "Expert stages fused into kiln.megamoe">,
  ];
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::shard::ShardDialect"];
}


def InsertSPCollectives : Pass<"kiln-insert-sp-collectives", "mlir::ModuleOp"> {
  let summary = "Sequence parallelism: reduce-scatter tokens after o_proj, all-gather before QKV";
  let description = [{
    Runs after `kiln-shard` (tp > 1) and `kiln-form-megamoe`. The
    `shard.all_reduce` of the o_proj partial sums becomes a
    `shard.reduce_scatter` over tokens, so each TP rank holds T/TP tokens of
    the residual stream. Token-local ops (norms, gated residuals, router,
    pooler, experts, unpooler) then run on the shard; replicated inputs they
    meet (the embedding) are cut with `shard.all_slice`. Ops that need the
    whole sequence (the QKV projections, attention, the output head) get it
    back from a `shard.all_gather`:

    ```mlir
    %o = shard.reduce_scatter %p on @tp grid_axes = [1, 2] scatter_axis = 0
           : tensor<16x256xbf16> -> tensor<8x256xbf16>
    ...
    %n = kiln.rms_norm %h, %w {eps = 1.0e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
    %all = shard.all_gather %n on @tp grid_axes = [1, 2] gather_axis = 0
             : tensor<8x256xbf16> -> tensor<16x256xbf16>
    %q = kiln.linear %all, %wq : ...
    ```

    Refused, with the reason: IR without a @tp grid, a static token count
    that TP does not divide (a dynamic one is the caller's to split evenly: a
    target's `prefill_sp` entry takes multiples of TP), a pooler split by
    `kiln-shard-pooler`, and an unfused expert-parallel stage (its sum over
    the expert group assumes every rank holds the same tokens).
  }];
  let statistics = [
    Statistic<"numScatters", "reduce-scatters", "All-reduces turned into reduce-scatters">,
    Statistic<"numGathers", "all-gathers", "All-gathers inserted before full-sequence ops">,
  ];
  let dependentDialects = ["::kiln::KilnDialect", "::mlir::shard::ShardDialect"];
}


//===----------------------------------------------------------------------===//
// Plans
//===----------------------------------------------------------------------===//

def PlanAssignOffsets : Pass<"plan-assign-offsets", "mlir::ModuleOp"> {
  let summary = "Place every plan.alloc of an entry point in one arena";
  let description = [{
    Memory planning from liveness: a buffer lives from its `plan.alloc` to
    the last step that uses it (directly or through a `plan.view`). Buffers
    are placed in definition order at the lowest 64-byte aligned offset that
    overlaps no buffer still alive, so dead buffers' bytes are reused. Sizes
    are taken at the entry's `max_tokens`. Sets each alloc's `offset` and the
    entry's `arena_bytes`.

    ```mlir
    plan.entry @decode attributes {arena_bytes = 2048 : i64, max_tokens = 1 : i64} {
      %a = plan.alloc [#plan.dim<16, 0, 1>, #plan.dim<16, 0, 1>] f32 {offset = 0 : i64}
      ...
    }
    ```
  }];
  let statistics = [
    Statistic<"numPlanned", "buffers", "Buffers placed">,
  ];
  let dependentDialects = ["::kiln::plan::PlanDialect"];
}

#endif // KILN_PASSES_TD
