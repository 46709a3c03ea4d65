// The ops that passes form: round trip.
// RUN: kiln-opt %s -split-input-file | kiln-opt -split-input-file | FileCheck %s
// RUN: kiln-opt %s -split-input-file --mlir-print-op-generic | kiln-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @norm_residual
func.func @norm_residual(%x: tensor<8x256xbf16>, %o: tensor<8x256xbf16>, %w: tensor<256xbf16>) -> (tensor<8x256xbf16>, tensor<8x256xbf16>) {
  // CHECK: %{{.+}}, %{{.+}} = kiln.norm_residual %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {next_eps = 1.000000e-05 : f64, post_eps = 1.000000e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<256xbf16>
  %h, %u = kiln.norm_residual %x, %o, %w, %w, %w {post_eps = 1.0e-05 : f64, next_eps = 1.0e-05 : f64}
             : tensor<8x256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<256xbf16>
  return %h, %u : tensor<8x256xbf16>, tensor<8x256xbf16>
}

// -----

shard.grid @ep(shape = 1x2)
// CHECK-LABEL: func.func @expert_parallel
func.func @expert_parallel(%z: tensor<8x128xbf16>, %idx: tensor<8x4xi32>, %w: tensor<8x4xf32>,
                           %g: tensor<8x128x128xbf16>, %pn: tensor<8x128xbf16>) -> (tensor<8x4xi32>, tensor<8x128xbf16>) {
  // CHECK: kiln.local_experts %{{.+}} on @ep grid_axes = [1] {num_experts = 16 : i64} : tensor<8x4xi32>
  %local = kiln.local_experts %idx on @ep grid_axes = [1] {num_experts = 16 : i64} : tensor<8x4xi32>
  // CHECK: kiln.megamoe %{{.+}} on @ep grid_axes = [1] {eps = 1.000000e-05 : f64, num_experts = 16 : i64}
  %m = kiln.megamoe %z, %idx, %w, %g, %g, %g, %pn on @ep grid_axes = [1] {eps = 1.0e-05 : f64, num_experts = 16 : i64}
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<8x4xf32>, tensor<8x128x128xbf16>,
           tensor<8x128x128xbf16>, tensor<8x128x128xbf16>, tensor<8x128xbf16>
  return %local, %m : tensor<8x4xi32>, tensor<8x128xbf16>
}

// -----

// CHECK-LABEL: func.func @megamoe_single_rank
func.func @megamoe_single_rank(%z: tensor<8x128xbf16>, %idx: tensor<8x4xi32>, %w: tensor<8x4xf32>,
                               %g: tensor<16x128x128xbf16>, %pn: tensor<16x128xbf16>) -> tensor<8x128xbf16> {
  // CHECK: kiln.megamoe {{.+}} {eps = 1.000000e-05 : f64, num_experts = 16 : i64} :
  %m = kiln.megamoe %z, %idx, %w, %g, %g, %g, %pn {eps = 1.0e-05 : f64, num_experts = 16 : i64}
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<8x4xf32>, tensor<16x128x128xbf16>,
           tensor<16x128x128xbf16>, tensor<16x128x128xbf16>, tensor<16x128xbf16>
  return %m : tensor<8x128xbf16>
}


// -----

// CHECK-LABEL: func.func @head_norm_rope
func.func @head_norm_rope(%q: tensor<8x6x32xbf16>, %w: tensor<32xbf16>, %pos: tensor<8xi32>) -> tensor<8x6x32xbf16> {
  // CHECK: kiln.head_norm_rope %{{.+}}, %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64, theta = 1.000000e+07 : f64} : tensor<8x6x32xbf16>, tensor<32xbf16>, tensor<8xi32>
  %r = kiln.head_norm_rope %q, %w, %pos {eps = 1.0e-05 : f64, theta = 1.0e+07 : f64}
         : tensor<8x6x32xbf16>, tensor<32xbf16>, tensor<8xi32>
  return %r : tensor<8x6x32xbf16>
}
