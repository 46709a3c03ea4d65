// An op that declares neither TokenWiseOp nor WholeSequence (here one of
// another dialect) is refused when it would take a token-sharded value:
// placed on a shard it would compute as if the shard were the sequence.
// RUN: kiln-opt %s -kiln-insert-sp-collectives -split-input-file -verify-diagnostics | FileCheck %s

module {
  shard.grid @tp(shape = 1x2x1)
  func.func @forward(%x: tensor<8x256xbf16>) -> tensor<8x256xbf16> {
    %sum = shard.all_reduce %x on @tp grid_axes = [1, 2] : tensor<8x256xbf16> -> tensor<8x256xbf16>
    // expected-error @+1 {{'arith.addf' op takes a token-sharded operand but declares neither TokenWiseOp (it works token by token) nor WholeSequence (it needs every token)}}
    %twice = arith.addf %sum, %sum : tensor<8x256xbf16>
    return %twice : tensor<8x256xbf16>
  }
}

// -----

// A declared token-wise op on the same value runs on the shard.
// CHECK-LABEL: func.func @forward
// CHECK: %[[SHARD:.*]] = shard.reduce_scatter
// CHECK: kiln.rms_norm %[[SHARD]], {{.*}} : tensor<4x256xbf16>, tensor<256xbf16>
// CHECK: shard.all_gather
module {
  shard.grid @tp(shape = 1x2x1)
  func.func @forward(%x: tensor<8x256xbf16>, %w: tensor<256xbf16>) -> tensor<8x256xbf16> {
    %sum = shard.all_reduce %x on @tp grid_axes = [1, 2] : tensor<8x256xbf16> -> tensor<8x256xbf16>
    %normed = kiln.rms_norm %sum, %w {eps = 1.000000e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
    return %normed : tensor<8x256xbf16>
  }
}
