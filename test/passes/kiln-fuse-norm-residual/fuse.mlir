// RUN: kiln-opt %s -kiln-fuse-norm-residual -split-input-file | FileCheck %s

// The attention → MoE boundary: post norm, gate, residual add, next norm.
// The residual stream (%h) goes on to its next reader; the eps of each norm
// keeps its place.
// CHECK-LABEL: func.func @boundary
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[U:[^:]+]]: tensor<4x8xbf16>, %[[POST:[^:]+]]: tensor<8xbf16>, %[[GATE:[^:]+]]: tensor<8xbf16>, %[[NEXT:[^:]+]]: tensor<8xbf16>)
// CHECK-NOT: kiln.rms_norm
// CHECK-NOT: kiln.mul
// CHECK-NOT: kiln.add
// CHECK: %[[H:.+]], %[[Y:.+]] = kiln.norm_residual %[[X]], %[[U]], %[[POST]], %[[GATE]], %[[NEXT]]
// CHECK-SAME: next_eps = 3.125000e-02 : f64, post_eps = 1.000000e-05 : f64
// CHECK-SAME: : tensor<4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>, tensor<8xbf16>
// CHECK-NOT: kiln.rms_norm
// CHECK-NOT: kiln.mul
// CHECK-NOT: kiln.add
// CHECK: return %[[H]], %[[Y]]
func.func @boundary(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                    %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 3.125e-02 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// The residual on the right of the add fuses the same way.
// CHECK-LABEL: func.func @residual_on_rhs
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[U:[^:]+]]: tensor<4x8xbf16>, %[[POST:[^:]+]]: tensor<8xbf16>, %[[GATE:[^:]+]]: tensor<8xbf16>, %[[NEXT:[^:]+]]: tensor<8xbf16>)
// CHECK-NOT: kiln.add
// CHECK: %[[H:.+]], %[[Y:.+]] = kiln.norm_residual %[[X]], %[[U]], %[[POST]], %[[GATE]], %[[NEXT]]
// CHECK-NOT: kiln.rms_norm
// CHECK-NOT: kiln.mul
// CHECK-NOT: kiln.add
// CHECK: return %[[H]], %[[Y]]
func.func @residual_on_rhs(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                           %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %g, %x : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// As kilnc builds it: weights are kiln.weight ops defined just before their
// use (the next norm's weight after the add), and two boundaries in a row,
// the second reading the first's new residual. The fused op sits where the
// next norm was.
// CHECK-LABEL: func.func @two_boundaries
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[A:[^:]+]]: tensor<4x8xbf16>, %[[M:[^:]+]]: tensor<4x8xbf16>)
// CHECK: %[[POST1:.+]] = kiln.weight "model.layers.0.post_attention_layernorm.weight"
// CHECK-NEXT: %[[GATE1:.+]] = kiln.weight "model.layers.0.attn_residual_gate"
// CHECK-NEXT: %[[NEXT1:.+]] = kiln.weight "model.layers.0.pre_feedforward_layernorm.weight"
// CHECK-NEXT: %[[H1:.+]], %[[Y1:.+]] = kiln.norm_residual %[[X]], %[[A]], %[[POST1]], %[[GATE1]], %[[NEXT1]]
// CHECK-NEXT: %[[POST2:.+]] = kiln.weight "model.layers.0.post_feedforward_layernorm.weight"
// CHECK-NEXT: %[[GATE2:.+]] = kiln.weight "model.layers.0.mlp_residual_gate"
// CHECK-NEXT: %[[NEXT2:.+]] = kiln.weight "model.norm.weight"
// CHECK-NEXT: %[[H2:.+]], %[[Y2:.+]] = kiln.norm_residual %[[H1]], %[[M]], %[[POST2]], %[[GATE2]], %[[NEXT2]]
// CHECK-NEXT: return %[[Y1]], %[[Y2]]
func.func @two_boundaries(%x: tensor<4x8xbf16>, %a: tensor<4x8xbf16>, %m: tensor<4x8xbf16>)
    -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %post1 = kiln.weight "model.layers.0.post_attention_layernorm.weight" : tensor<8xbf16>
  %n1 = kiln.rms_norm %a, %post1 {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %gate1 = kiln.weight "model.layers.0.attn_residual_gate" : tensor<8xbf16>
  %g1 = kiln.mul %n1, %gate1 : tensor<4x8xbf16>, tensor<8xbf16>
  %h1 = kiln.add %x, %g1 : tensor<4x8xbf16>, tensor<4x8xbf16>
  %next1 = kiln.weight "model.layers.0.pre_feedforward_layernorm.weight" : tensor<8xbf16>
  %y1 = kiln.rms_norm %h1, %next1 {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %post2 = kiln.weight "model.layers.0.post_feedforward_layernorm.weight" : tensor<8xbf16>
  %n2 = kiln.rms_norm %m, %post2 {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %gate2 = kiln.weight "model.layers.0.mlp_residual_gate" : tensor<8xbf16>
  %g2 = kiln.mul %n2, %gate2 : tensor<4x8xbf16>, tensor<8xbf16>
  %h2 = kiln.add %h1, %g2 : tensor<4x8xbf16>, tensor<4x8xbf16>
  %next2 = kiln.weight "model.norm.weight" : tensor<8xbf16>
  %y2 = kiln.rms_norm %h2, %next2 {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %y1, %y2 : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// %h feeds two norms: the first in block order is fused, the second reads
// the fused op's new residual.
// CHECK-LABEL: func.func @two_norms_of_h
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[U:[^:]+]]: tensor<4x8xbf16>, %[[POST:[^:]+]]: tensor<8xbf16>, %[[GATE:[^:]+]]: tensor<8xbf16>, %[[NEXT:[^:]+]]: tensor<8xbf16>, %[[OTHER:[^:]+]]: tensor<8xbf16>)
// CHECK-NEXT: %[[H:.+]], %[[Y:.+]] = kiln.norm_residual %[[X]], %[[U]], %[[POST]], %[[GATE]], %[[NEXT]]
// CHECK-NEXT: %[[Z:.+]] = kiln.rms_norm %[[H]], %[[OTHER]]
// CHECK-NEXT: return %[[Y]], %[[Z]]
func.func @two_norms_of_h(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                          %gate: tensor<8xbf16>, %next: tensor<8xbf16>, %other: tensor<8xbf16>)
    -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %z = kiln.rms_norm %h, %other {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %y, %z : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// Another reader of %h sits between the add and the next norm, whose weight
// is defined before the add: the fused op takes the add's place.
// CHECK-LABEL: func.func @reader_before_next_norm
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[U:[^:]+]]: tensor<4x8xbf16>, %[[POST:[^:]+]]: tensor<8xbf16>, %[[GATE:[^:]+]]: tensor<8xbf16>, %[[NEXT:[^:]+]]: tensor<8xbf16>, %[[W:[^:]+]]: tensor<8x8xbf16>)
// CHECK-NEXT: %[[H:.+]], %[[Y:.+]] = kiln.norm_residual %[[X]], %[[U]], %[[POST]], %[[GATE]], %[[NEXT]]
// CHECK-NEXT: %[[P:.+]] = kiln.linear %[[H]], %[[W]]
// CHECK-NEXT: return %[[P]], %[[Y]]
func.func @reader_before_next_norm(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                                   %gate: tensor<8xbf16>, %next: tensor<8xbf16>, %w: tensor<8x8xbf16>)
    -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %p = kiln.linear %h, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %p, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// Sharded IR from kiln-shard: the update is the all-reduced o_proj output.
// CHECK-LABEL: func.func @sharded_update
// CHECK-SAME: (%[[X:[^:]+]]: tensor<4x8xbf16>, %[[PARTIAL:[^:]+]]: tensor<4x8xbf16>, %[[POST:[^:]+]]: tensor<8xbf16>, %[[GATE:[^:]+]]: tensor<8xbf16>, %[[NEXT:[^:]+]]: tensor<8xbf16>)
// CHECK-NEXT: %[[U:.+]] = shard.all_reduce %[[PARTIAL]] on @tp
// CHECK-NEXT: %[[H:.+]], %[[Y:.+]] = kiln.norm_residual %[[X]], %[[U]], %[[POST]], %[[GATE]], %[[NEXT]]
// CHECK-NEXT: return %[[H]], %[[Y]]
shard.grid @tp(shape = 2)
func.func @sharded_update(%x: tensor<4x8xbf16>, %partial: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                          %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %u = shard.all_reduce %partial on @tp grid_axes = [0] : tensor<4x8xbf16> -> tensor<4x8xbf16>
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// No fusion: the normed value %n has a second reader, so the post norm
// cannot disappear into the fused op. Here and below, CHECK-NEXT pins every
// op of the body: the IR is unchanged.
// CHECK-LABEL: func.func @normed_used_twice
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]],
// CHECK-NEXT: return %[[Y]], %[[N]]
func.func @normed_used_twice(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                             %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %y, %n : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// No fusion: the gated value %g has a second reader.
// CHECK-LABEL: func.func @gated_used_twice
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]],
// CHECK-NEXT: return %[[Y]], %[[G]]
func.func @gated_used_twice(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                            %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %y, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// No fusion: the multiplier is a full [tokens, hidden] tensor, not a
// per-channel gate vector. kiln.norm_residual's gate is [hidden] (the
// model's residual gates are learned vectors), so this product has no place
// in it and is left alone. Tokens == hidden here, so only the gate's rank
// tells the two apart.
// CHECK-LABEL: func.func @full_tensor_multiplier
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]], %{{.+}} : tensor<8x8xbf16>, tensor<8x8xbf16>
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]],
// CHECK-NEXT: return %[[H]], %[[Y]]
func.func @full_tensor_multiplier(%x: tensor<8x8xbf16>, %u: tensor<8x8xbf16>, %post: tensor<8xbf16>,
                                  %scale: tensor<8x8xbf16>, %next: tensor<8xbf16>) -> (tensor<8x8xbf16>, tensor<8x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<8x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %scale : tensor<8x8xbf16>, tensor<8x8xbf16>
  %h = kiln.add %x, %g : tensor<8x8xbf16>, tensor<8x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<8x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<8x8xbf16>, tensor<8x8xbf16>
}

// -----

// No fusion: nothing normalises the sum.
// CHECK-LABEL: func.func @no_next_norm
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: return %[[H]]
func.func @no_next_norm(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                        %gate: tensor<8xbf16>) -> tensor<4x8xbf16> {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  return %h : tensor<4x8xbf16>
}

// -----

// No fusion: another op (a bias add) sits between the post norm and the gate.
// CHECK-LABEL: func.func @op_in_between
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[B:.+]] = kiln.add %[[N]],
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[B]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]],
// CHECK-NEXT: return %[[H]], %[[Y]]
func.func @op_in_between(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>, %bias: tensor<8xbf16>,
                         %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %b = kiln.add %n, %bias : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %b, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// No fusion: the "residual" is a broadcast vector, not a [tokens, hidden]
// tensor of the update's type.
// CHECK-LABEL: func.func @vector_residual
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %[[G]], %{{.+}} : tensor<4x8xbf16>, tensor<8xbf16>
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]],
// CHECK-NEXT: return %[[H]], %[[Y]]
func.func @vector_residual(%bias: tensor<8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                           %gate: tensor<8xbf16>, %next: tensor<8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %g, %bias : tensor<4x8xbf16>, tensor<8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %h, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}

// -----

// No fusion: a reader of %h comes before the next norm, and the next norm's
// weight is defined only after that reader, so no single place can hold the
// fused op.
// CHECK-LABEL: func.func @no_place_for_fused_op
// CHECK-NEXT: %[[N:.+]] = kiln.rms_norm
// CHECK-NEXT: %[[G:.+]] = kiln.mul %[[N]],
// CHECK-NEXT: %[[H:.+]] = kiln.add %{{.+}}, %[[G]]
// CHECK-NEXT: %[[P:.+]] = kiln.linear %[[H]],
// CHECK-NEXT: %[[NEXT:.+]] = kiln.weight "model.layers.0.pre_feedforward_layernorm.weight"
// CHECK-NEXT: %[[Y:.+]] = kiln.rms_norm %[[H]], %[[NEXT]]
// CHECK-NEXT: return %[[P]], %[[Y]]
func.func @no_place_for_fused_op(%x: tensor<4x8xbf16>, %u: tensor<4x8xbf16>, %post: tensor<8xbf16>,
                                 %gate: tensor<8xbf16>, %w: tensor<8x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xbf16>) {
  %n = kiln.rms_norm %u, %post {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %g = kiln.mul %n, %gate : tensor<4x8xbf16>, tensor<8xbf16>
  %h = kiln.add %x, %g : tensor<4x8xbf16>, tensor<4x8xbf16>
  %p = kiln.linear %h, %w : tensor<4x8xbf16>, tensor<8x8xbf16> -> tensor<4x8xbf16>
  %next = kiln.weight "model.layers.0.pre_feedforward_layernorm.weight" : tensor<8xbf16>
  %y = kiln.rms_norm %h, %next {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  return %p, %y : tensor<4x8xbf16>, tensor<4x8xbf16>
}
