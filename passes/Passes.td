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
    - The router, norms, pooler and unpooler stay replicated.

    Checkpoint tensors keep their full type; `shard.all_slice` says which
    piece a rank keeps, so a runtime loads only that piece.

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

#endif // KILN_PASSES_TD
