// kiln-shard-pooler splits the pooler and unpooler outputs over the TP group
// and all-gathers them; without a @tp grid it does nothing.
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-shard="tp=2" -kiln-shard-pooler | FileCheck %s
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-shard="tp=2 ep=2" -kiln-form-megamoe -kiln-shard-pooler | FileCheck %s --check-prefix=MEGA
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-shard-pooler > %t.a.mlir
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir > %t.b.mlir
// RUN: diff %t.a.mlir %t.b.mlir
// RUN: kiln-opt %S/../kiln-shard/Inputs/layer.mlir -kiln-shard="ep=2" -kiln-shard-pooler | FileCheck %s --check-prefix=EPONLY
// RUN: not kiln-opt %s -kiln-shard-pooler 2>&1 | FileCheck %s --check-prefix=ODD

// The router stays whole.
// CHECK: kiln.linear %{{.+}}, %{{.+}} : tensor<4x16xbf16>, tensor<4x16xbf16> -> tensor<4x4xf32>
// CHECK: %[[WP:.+]] = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<8x16xbf16>
// CHECK-NEXT: %[[WPS:.+]] = shard.all_slice %[[WP]] on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<8x16xbf16> -> tensor<4x16xbf16>
// CHECK-NEXT: %[[ZS:.+]] = kiln.linear %{{.+}}, %[[WPS]] : tensor<4x16xbf16>, tensor<4x16xbf16> -> tensor<4x4xbf16>
// CHECK-NEXT: %[[Z:.+]] = shard.all_gather %[[ZS]] on @tp grid_axes = [1, 2] gather_axis = 1 : tensor<4x4xbf16> -> tensor<4x8xbf16>
// CHECK: kiln.rms_norm %[[Z]]
// CHECK: kiln.combine
// CHECK: shard.all_slice %{{.+}} on @tp grid_axes = [1, 2] slice_axis = 0 : tensor<16x8xbf16> -> tensor<8x8xbf16>
// CHECK-NEXT: %[[MS:.+]] = kiln.linear %{{.+}} : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[M:.+]] = shard.all_gather %[[MS]] on @tp grid_axes = [1, 2] gather_axis = 1 : tensor<4x8xbf16> -> tensor<4x16xbf16>
// CHECK-NEXT: kiln.add %{{.+}}, %[[M]]

// The unpooler is found behind a kiln.megamoe too.
// MEGA: kiln.megamoe
// MEGA-NEXT: kiln.weight "model.layers.0.mlp.unpooler.weight"
// MEGA-NEXT: shard.all_slice
// MEGA-NEXT: kiln.linear
// MEGA-NEXT: shard.all_gather

// EPONLY-NOT: shard.all_gather

// A pooler whose width TP does not divide.
shard.grid @tp(shape = 1x4x1)
func.func @odd(%u: tensor<4x16xbf16>, %idx: tensor<4x2xi32>, %w: tensor<4x2xf32>, %g: tensor<4x6x6xbf16>, %pn: tensor<4x6xbf16>) -> tensor<4x6xbf16> {
  %wp = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<6x16xbf16>
  // ODD: error: 'kiln.linear' op TP 4 does not divide the 6 output features of the pooler/unpooler
  %z0 = kiln.linear %u, %wp : tensor<4x16xbf16>, tensor<6x16xbf16> -> tensor<4x6xbf16>
  %nw = kiln.weight "model.layers.0.mlp.expert_input_norm.weight" : tensor<6xbf16>
  %z = kiln.rms_norm %z0, %nw {eps = 1.0e-05 : f64} : tensor<4x6xbf16>, tensor<6xbf16>
  %m = kiln.megamoe %z, %idx, %w, %g, %g, %g, %pn {eps = 1.0e-05 : f64, num_experts = 4 : i64}
         : tensor<4x6xbf16>, tensor<4x2xi32>, tensor<4x2xf32>, tensor<4x6x6xbf16>, tensor<4x6x6xbf16>, tensor<4x6x6xbf16>, tensor<4x6xbf16>
  return %m : tensor<4x6xbf16>
}
