// kiln-shard on one layer. Positive cases: heads split (TP=2 keeps 2 query
// and 1 KV head per rank), KV heads replicated (TP=4 > 2 KV heads), experts
// split (EP=2). No-op: tp=1 ep=1.
// RUN: kiln-opt %S/Inputs/layer.mlir -kiln-shard="tp=2" | FileCheck %s --check-prefix=TP2
// RUN: kiln-opt %S/Inputs/layer.mlir -kiln-shard="tp=4" | FileCheck %s --check-prefix=TP4
// RUN: kiln-opt %S/Inputs/layer.mlir -kiln-shard="ep=2" | FileCheck %s --check-prefix=EP2
// RUN: kiln-opt %S/Inputs/layer.mlir -kiln-shard > %t.none.mlir
// RUN: kiln-opt %S/Inputs/layer.mlir > %t.input.mlir
// RUN: diff %t.none.mlir %t.input.mlir

// TP2: shard.grid @tp(shape = 1x2x1)
// TP2-NOT: shard.grid @ep
// TP2: %[[WQ:.+]] = kiln.weight "model.layers.0.self_attn.q_proj.weight" : tensor<16x16xbf16>
// TP2-NEXT: %[[WQL:.+]] = shard.all_slice %[[WQ]] on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<16x16xbf16> -> tensor<8x16xbf16>
// TP2-NEXT: kiln.linear %{{.+}}, %[[WQL]] : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
// TP2: shard.all_slice %{{.+}} on @tp grid_axes = [1] slice_axis = 0 : tensor<8x16xbf16> -> tensor<4x16xbf16>
// TP2: kiln.split_heads %{{.+}} : tensor<4x8xbf16> -> tensor<4x2x4xbf16>
// TP2: kiln.attention {{.+}} : tensor<4x2x4xbf16>, tensor<4x1x4xbf16>, tensor<4x1x4xbf16>, tensor<4xi32> -> tensor<4x2x4xbf16>
// TP2: kiln.merge_heads %{{.+}} : tensor<4x2x4xbf16> -> tensor<4x8xbf16>
// TP2: shard.all_slice %{{.+}} on @tp grid_axes = [1, 2] slice_axis = 1 : tensor<16x16xbf16> -> tensor<16x8xbf16>
// TP2-NEXT: %[[O:.+]] = kiln.linear
// TP2-NEXT: %[[R:.+]] = shard.all_reduce %[[O]] on @tp grid_axes = [1, 2] : tensor<4x16xbf16> -> tensor<4x16xbf16>
// TP2-NEXT: kiln.add %{{.+}}, %[[R]]
// The router, pooler and unpooler stay whole.
// TP2: kiln.linear %{{.+}}, %{{.+}} : tensor<4x16xbf16>, tensor<4x16xbf16> -> tensor<4x4xf32>
// TP2: kiln.linear %{{.+}}, %{{.+}} : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
// TP2-NOT: kiln.local_experts

// TP4: shard.grid @tp(shape = 1x2x2)
// TP4: shard.all_slice %{{.+}} on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<16x16xbf16> -> tensor<4x16xbf16>
// Two KV heads over four ranks: each KV head on the two ranks that read it.
// TP4: shard.all_slice %{{.+}} on @tp grid_axes = [1] slice_axis = 0 : tensor<8x16xbf16> -> tensor<4x16xbf16>
// TP4: kiln.attention {{.+}} : tensor<4x1x4xbf16>, tensor<4x1x4xbf16>, tensor<4x1x4xbf16>, tensor<4xi32> -> tensor<4x1x4xbf16>

// EP2: shard.grid @ep(shape = 1x2)
// EP2-NOT: shard.grid @tp
// EP2: shard.all_slice %{{.+}} on @ep grid_axes = [1] slice_axis = 0 : tensor<4x8x8xbf16> -> tensor<2x8x8xbf16>
// EP2: %[[LOCAL:.+]] = kiln.local_experts %{{.+}} on @ep grid_axes = [1] {num_experts = 4 : i64} : tensor<4x2xi32>
// EP2-NEXT: kiln.expert_swiglu %{{.+}}, %[[LOCAL]], {{.+}} : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16> -> tensor<4x2x8xbf16>
// EP2: kiln.expert_norm %{{.+}}, %[[LOCAL]], %{{.+}} {{.+}} tensor<2x8xbf16>
// EP2: %[[S:.+]] = kiln.combine
// EP2-NEXT: shard.all_reduce %[[S]] on @ep grid_axes = [1] : tensor<4x8xbf16> -> tensor<4x8xbf16>
