// kiln-form-megamoe: expert_swiglu -> expert_norm -> combine (and, under EP,
// local_experts before and the sum over the expert group after) become one
// kiln.megamoe.
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-form-megamoe | FileCheck %s
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-shard="ep=2" -kiln-form-megamoe | FileCheck %s --check-prefix=EP
// RUN: kiln-opt %s -kiln-form-megamoe -split-input-file | FileCheck %s --check-prefix=NOOP

// CHECK: %[[W:.+]], %[[IDX:.+]] = kiln.router_topk
// CHECK: %[[G:.+]] = kiln.weight "model.layers.0.mlp.experts.{e}.gate_proj.weight"
// CHECK: %[[PN:.+]] = kiln.weight "model.layers.0.mlp.experts.{e}.post_norm.weight"
// CHECK-NEXT: %[[M:.+]] = kiln.megamoe %{{.+}}, %[[IDX]], %[[W]], %[[G]], %{{.+}}, %{{.+}}, %[[PN]] {eps = 1.000000e-05 : f64, num_experts = 4 : i64} : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16>, tensor<4x8xbf16>
// CHECK-NOT: kiln.expert_swiglu
// CHECK-NOT: kiln.expert_norm
// CHECK-NOT: kiln.combine
// CHECK: kiln.linear %[[M]]

// EP: %[[W:.+]], %[[IDX:.+]] = kiln.router_topk
// EP-NOT: kiln.local_experts
// EP: kiln.megamoe %{{.+}}, %[[IDX]], %[[W]], {{.+}} on @ep grid_axes = [1] {eps = 1.000000e-05 : f64, num_experts = 4 : i64} : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>, tensor<2x8xbf16>
// EP-NOT: shard.all_reduce
// EP-NOT: kiln.combine

// A chain whose expert outputs have another user is left alone.
// NOOP-LABEL: func.func @second_use
// NOOP: kiln.expert_swiglu
// NOOP: kiln.expert_norm
// NOOP: kiln.combine
// NOOP-NOT: kiln.megamoe
func.func @second_use(%z: tensor<4x8xbf16>, %idx: tensor<4x2xi32>, %w: tensor<4x2xf32>, %g: tensor<4x8x8xbf16>, %pn: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x2x8xbf16>) {
  %y = kiln.expert_swiglu %z, %idx, %g, %g, %g : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16> -> tensor<4x2x8xbf16>
  %yn = kiln.expert_norm %y, %idx, %pn {eps = 1.0e-05 : f64} : tensor<4x2x8xbf16>, tensor<4x2xi32>, tensor<4x8xbf16>
  %s = kiln.combine %yn, %w : tensor<4x2x8xbf16>, tensor<4x2xf32> -> tensor<4x8xbf16>
  return %s, %yn : tensor<4x8xbf16>, tensor<4x2x8xbf16>
}

// -----

// Under EP, a combine that is not summed over the expert group (here: no
// collective at all) is not the model's stage.
// NOOP-LABEL: func.func @unreduced
// NOOP: kiln.local_experts
// NOOP-NOT: kiln.megamoe
shard.grid @ep(shape = 1x2)
func.func @unreduced(%z: tensor<4x8xbf16>, %idx: tensor<4x2xi32>, %w: tensor<4x2xf32>, %g: tensor<2x8x8xbf16>, %pn: tensor<2x8xbf16>) -> tensor<4x8xbf16> {
  %l = kiln.local_experts %idx on @ep grid_axes = [1] {num_experts = 4 : i64} : tensor<4x2xi32>
  %y = kiln.expert_swiglu %z, %l, %g, %g, %g : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16>, tensor<2x8x8xbf16> -> tensor<4x2x8xbf16>
  %yn = kiln.expert_norm %y, %l, %pn {eps = 1.0e-05 : f64} : tensor<4x2x8xbf16>, tensor<4x2xi32>, tensor<2x8xbf16>
  %s = kiln.combine %yn, %w : tensor<4x2x8xbf16>, tensor<4x2xf32> -> tensor<4x8xbf16>
  return %s : tensor<4x8xbf16>
}
