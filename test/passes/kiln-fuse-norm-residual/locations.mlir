// RUN: kiln-opt %s -kiln-fuse-norm-residual -mlir-print-debuginfo -mlir-print-local-scope | FileCheck %s

// The fused op carries the locations of the four ops it replaces, in chain
// order: post norm, gate, residual add, next norm.
// CHECK-LABEL: func.func @boundary
// CHECK: kiln.norm_residual
// CHECK-SAME: loc(fused["post_norm", "gate_mul", "residual_add", "next_norm"])
func.func @boundary(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                    %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16> loc("post_norm")
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16> loc("gate_mul")
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16> loc("residual_add")
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16> loc("next_norm")
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}
