// RUN: kiln-opt %s -kiln-fuse-head-norm-rope -split-input-file | FileCheck %s

// A head norm read only by a rope becomes one kiln.head_norm_rope with the
// norm's eps and the rope's theta.
// CHECK-LABEL: func.func @pair
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<4x6x32xbf16>, %[[W:[^:]+]]: tensor<32xbf16>, %[[P:[^:]+]]: tensor<4xi32>)
// CHECK-NOT: kiln.head_norm %
// CHECK-NOT: kiln.rope
// CHECK: %[[R:.+]] = kiln.head_norm_rope %[[Q]], %[[W]], %[[P]] {eps = 9.9999999999999995E-7 : f64, theta = 1.000000e+04 : f64}
// CHECK: return %[[R]]
func.func @pair(%q: tensor<4x6x32xbf16>, %w: tensor<32xbf16>, %pos: tensor<4xi32>) -> tensor<4x6x32xbf16> {
  %n = kiln.head_norm %q, %w {eps = 1.0e-06 : f64} : tensor<4x6x32xbf16>, tensor<32xbf16>
  %r = kiln.rope %n, %pos {theta = 1.0e+04 : f64} : tensor<4x6x32xbf16>, tensor<4xi32>
  return %r : tensor<4x6x32xbf16>
}

// -----

// A norm with another reader stays: that reader needs the unrotated rows.
// CHECK-LABEL: func.func @norm_read_twice
// CHECK: %[[N:.+]] = kiln.head_norm
// CHECK: kiln.rope %[[N]]
// CHECK-NOT: kiln.head_norm_rope
// CHECK: return
func.func @norm_read_twice(%q: tensor<4x6x32xbf16>, %w: tensor<32xbf16>, %pos: tensor<4xi32>)
    -> (tensor<4x6x32xbf16>, tensor<4x6x32xbf16>) {
  %n = kiln.head_norm %q, %w {eps = 1.0e-06 : f64} : tensor<4x6x32xbf16>, tensor<32xbf16>
  %r = kiln.rope %n, %pos {theta = 1.0e+04 : f64} : tensor<4x6x32xbf16>, tensor<4xi32>
  return %n, %r : tensor<4x6x32xbf16>, tensor<4x6x32xbf16>
}

// -----

// A rope of anything but a head norm is left alone.
// CHECK-LABEL: func.func @rope_alone
// CHECK-NOT: kiln.head_norm_rope
// CHECK: kiln.rope
func.func @rope_alone(%q: tensor<4x6x32xbf16>, %pos: tensor<4xi32>) -> tensor<4x6x32xbf16> {
  %r = kiln.rope %q, %pos {theta = 1.0e+04 : f64} : tensor<4x6x32xbf16>, tensor<4xi32>
  return %r : tensor<4x6x32xbf16>
}
