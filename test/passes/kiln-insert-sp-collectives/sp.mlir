// Sequence parallelism on two layers of muse-spark-tiny (8 tokens, TP=2).
// RUN: kilnc muse-spark-tiny --emit=model --tokens=8 -o %t.mlir
// RUN: kiln-opt %t.mlir -kiln-shard="tp=2 ep=2" -kiln-form-megamoe -kiln-insert-sp-collectives | FileCheck %s

// The embedding is computed whole, then each rank keeps its 4 tokens.
// CHECK: %[[X:.+]] = kiln.embed {{.+}} -> tensor<8x256xbf16>
// CHECK-NEXT: %[[XS:.+]] = shard.all_slice %[[X]] on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<8x256xbf16> -> tensor<4x256xbf16>
// The o_proj partial sums are reduce-scattered over tokens ...
// CHECK: %[[RS:.+]] = shard.reduce_scatter %{{.+}} on @tp grid_axes = [1, 2] scatter_axis = 0 : tensor<8x256xbf16> -> tensor<4x256xbf16>
// ... and the norms, gate, residual, router, pooler and experts run on the shard.
// CHECK-NEXT: kiln.weight "model.layers.0.post_attention_layernorm.weight"
// CHECK-NEXT: kiln.rms_norm %[[RS]], %{{.+}} : tensor<4x256xbf16>, tensor<256xbf16>
// CHECK: kiln.add %[[XS]], %{{.+}} : tensor<4x256xbf16>, tensor<4x256xbf16>
// CHECK: kiln.router_topk {{.+}} : tensor<4x16xf32> -> tensor<4x4xf32>, tensor<4x4xi32>
// CHECK: kiln.linear {{.+}} : tensor<4x256xbf16>, tensor<128x256xbf16> -> tensor<4x128xbf16>
// CHECK: kiln.megamoe {{.+}} on @ep grid_axes = [1] {{.+}} : tensor<4x128xbf16>, tensor<4x4xi32>, tensor<4x4xf32>
// CHECK: kiln.linear {{.+}} : tensor<4x128xbf16>, tensor<256x128xbf16> -> tensor<4x256xbf16>
// Layer 1's input norm runs on the shard; the all-gather comes before QKV.
// CHECK: kiln.weight "model.layers.1.input_layernorm.weight"
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm {{.+}} : tensor<4x256xbf16>, tensor<256xbf16>
// CHECK-NEXT: %[[ALL:.+]] = shard.all_gather %[[N]] on @tp grid_axes = [1, 2] gather_axis = 0 : tensor<4x256xbf16> -> tensor<8x256xbf16>
// CHECK: kiln.linear %[[ALL]], {{.+}} -> tensor<8x96xbf16>
// CHECK: kiln.linear %[[ALL]], {{.+}} -> tensor<8x32xbf16>
// CHECK: kiln.linear %[[ALL]], {{.+}} -> tensor<8x32xbf16>
// The output head sees every token again.
// CHECK: kiln.weight "model.norm.weight"
// CHECK-NEXT: %[[F:.+]] = kiln.rms_norm {{.+}} : tensor<4x256xbf16>, tensor<256xbf16>
// CHECK-NEXT: %[[FA:.+]] = shard.all_gather %[[F]] on @tp grid_axes = [1, 2] gather_axis = 0 : tensor<4x256xbf16> -> tensor<8x256xbf16>
// CHECK: kiln.logits %[[FA]]
// CHECK-NOT: shard.all_reduce
