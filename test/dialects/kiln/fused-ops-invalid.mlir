// Verifier messages of the ops that passes form.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @norm_residual_width(%x: tensor<8x256xbf16>, %w: tensor<256xbf16>, %n: tensor<128xbf16>) {
  // expected-error @+1 {{next_weight dimension 0 must be 256 (the residual's width)}}
  %h, %u = kiln.norm_residual %x, %x, %w, %w, %n {post_eps = 1.0e-05 : f64, next_eps = 1.0e-05 : f64}
             : tensor<8x256xbf16>, tensor<256xbf16>, tensor<256xbf16>, tensor<128xbf16>
  return
}

// -----

shard.grid @ep(shape = 3)
func.func @local_experts_not_dividing(%idx: tensor<8x4xi32>) {
  // expected-error @+1 {{expert parallelism of 3 must divide the number of experts (16)}}
  %l = kiln.local_experts %idx on @ep grid_axes = [0] {num_experts = 16 : i64} : tensor<8x4xi32>
  return
}

// -----

func.func @local_experts_no_grid(%idx: tensor<8x4xi32>) {
  // expected-error @+1 {{grid @nowhere is not a shard.grid in scope}}
  %l = kiln.local_experts %idx on @nowhere grid_axes = [0] {num_experts = 16 : i64} : tensor<8x4xi32>
  return
}

// -----

shard.grid @ep(shape = 1x2)
func.func @megamoe_stack_size(%z: tensor<8x128xbf16>, %idx: tensor<8x4xi32>, %w: tensor<8x4xf32>,
                              %g: tensor<4x128x128xbf16>, %pn: tensor<4x128xbf16>) {
  // expected-error @+1 {{the stacks hold 4 experts per rank but 16 experts over 2 ranks need 8}}
  %m = kiln.megamoe %z, %idx, %w, %g, %g, %g, %pn on @ep grid_axes = [1] {eps = 1.0e-05 : f64, num_experts = 16 : i64}
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<8x4xf32>, tensor<4x128x128xbf16>,
           tensor<4x128x128xbf16>, tensor<4x128x128xbf16>, tensor<4x128xbf16>
  return
}

// -----

shard.grid @ep(shape = 2)
func.func @megamoe_axis(%z: tensor<8x128xbf16>, %idx: tensor<8x4xi32>, %w: tensor<8x4xf32>,
                        %g: tensor<8x128x128xbf16>, %pn: tensor<8x128xbf16>) {
  // expected-error @+1 {{grid axis 1 is outside @ep of rank 1}}
  %m = kiln.megamoe %z, %idx, %w, %g, %g, %g, %pn on @ep grid_axes = [1] {eps = 1.0e-05 : f64, num_experts = 16 : i64}
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<8x4xf32>, tensor<8x128x128xbf16>,
           tensor<8x128x128xbf16>, tensor<8x128x128xbf16>, tensor<8x128xbf16>
  return
}

// -----

func.func @head_norm_rope_weight_width(%q: tensor<8x6x32xbf16>, %w: tensor<16xbf16>, %pos: tensor<8xi32>) {
  // expected-error @+1 {{weight}}
  %r = kiln.head_norm_rope %q, %w, %pos {eps = 1.0e-05 : f64, theta = 1.0e+07 : f64}
         : tensor<8x6x32xbf16>, tensor<16xbf16>, tensor<8xi32>
  return
}

// -----

func.func @head_norm_rope_odd_head_dim(%q: tensor<8x6x33xbf16>, %w: tensor<33xbf16>, %pos: tensor<8xi32>) {
  // expected-error @+1 {{head_dim 33 must be even}}
  %r = kiln.head_norm_rope %q, %w, %pos {eps = 1.0e-05 : f64, theta = 1.0e+07 : f64}
         : tensor<8x6x33xbf16>, tensor<33xbf16>, tensor<8xi32>
  return
}

// -----

func.func @head_norm_rope_positions(%q: tensor<8x6x32xbf16>, %w: tensor<32xbf16>, %pos: tensor<4xi32>) {
  // expected-error @+1 {{one position per token}}
  %r = kiln.head_norm_rope %q, %w, %pos {eps = 1.0e-05 : f64, theta = 1.0e+07 : f64}
         : tensor<8x6x32xbf16>, tensor<32xbf16>, tensor<4xi32>
  return
}

// -----

func.func @head_norm_rope_eps(%q: tensor<8x6x32xbf16>, %w: tensor<32xbf16>, %pos: tensor<8xi32>) {
  // expected-error @+1 {{eps}}
  %r = kiln.head_norm_rope %q, %w, %pos {eps = 2.0 : f64, theta = 1.0e+07 : f64}
         : tensor<8x6x32xbf16>, tensor<32xbf16>, tensor<8xi32>
  return
}
