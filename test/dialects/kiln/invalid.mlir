// Each op's verifier names what is wrong.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

func.func @weight_empty_name() {
  // expected-error @+1 {{name must not be empty}}
  %w = kiln.weight "" : tensor<4xbf16>
  return
}

// -----

func.func @weight_bad_placeholder() {
  // expected-error @+1 {{may hold one placeholder, and only '{e}'}}
  %w = kiln.weight "model.layers.{i}.mlp.router.weight" : tensor<4x4xbf16>
  return
}

// -----

func.func @weight_dynamic() {
  // expected-error @+1 {{checkpoint tensors have static shapes}}
  %w = kiln.weight "model.norm.weight" : tensor<?xbf16>
  return
}

// -----

func.func @weight_dtype() {
  // expected-error @+1 {{element type must be one a checkpoint stores}}
  %w = kiln.weight "model.norm.weight" : tensor<4xf64>
  return
}

// -----

func.func @weight_stack_rank0() {
  // expected-error @+1 {{an expert stack ('{e}' in the name) needs a leading expert dimension}}
  %w = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale_2" : tensor<f32>
  return
}

// -----

func.func @rms_norm_weight_width(%x: tensor<8x256xbf16>, %w: tensor<128xbf16>) {
  // expected-error @+1 {{weight dimension 0 must be 256 (the input's feature width), got 'tensor<128xbf16>'}}
  %n = kiln.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8x256xbf16>, tensor<128xbf16>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<8x256xbf16>, %w: tensor<256xbf16>) {
  // expected-error @+1 {{attribute 'eps' failed to satisfy constraint: 64-bit float attribute whose value is in (0, 1)}}
  %n = kiln.rms_norm %x, %w {eps = 0.0 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
  return
}

// -----

func.func @head_norm_rank(%x: tensor<8x192xbf16>, %w: tensor<32xbf16>) {
  // expected-error @+1 {{input must have rank 3 ([tokens, heads, head_dim])}}
  %n = kiln.head_norm %x, %w {eps = 1.0e-05 : f64} : tensor<8x192xbf16>, tensor<32xbf16>
  return
}

// -----

func.func @mul_not_broadcastable(%x: tensor<8x256xbf16>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{rhs 'tensor<8xbf16>' must match the trailing dimensions of lhs 'tensor<8x256xbf16>'}}
  %y = kiln.mul %x, %g : tensor<8x256xbf16>, tensor<8xbf16>
  return
}

// -----

func.func @add_element_types(%x: tensor<8x256xbf16>, %r: tensor<8x256xf32>) {
  // expected-error @+1 {{lhs and rhs must have the same element type, got 'bf16' and 'f32'}}
  %y = kiln.add %x, %r : tensor<8x256xbf16>, tensor<8x256xf32>
  return
}

// -----

func.func @linear_inner_dim(%x: tensor<8x256xbf16>, %w: tensor<192x128xbf16>) {
  // expected-error @+1 {{weight dimension 1 must be 256 (the input's width)}}
  %y = kiln.linear %x, %w : tensor<8x256xbf16>, tensor<192x128xbf16> -> tensor<8x192xbf16>
  return
}

// -----

func.func @linear_result(%x: tensor<8x256xbf16>, %w: tensor<192x256xbf16>) {
  // expected-error @+1 {{result dimension 1 must be 192 (the weight's out dimension)}}
  %y = kiln.linear %x, %w : tensor<8x256xbf16>, tensor<192x256xbf16> -> tensor<8x256xbf16>
  return
}

// -----

func.func @split_heads_product(%x: tensor<8x192xbf16>) {
  // expected-error @+1 {{features 192 must equal heads (5) x head_dim (32)}}
  %y = kiln.split_heads %x : tensor<8x192xbf16> -> tensor<8x5x32xbf16>
  return
}

// -----

func.func @rope_odd_head_dim(%x: tensor<8x6x33xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{head_dim 33 must be even}}
  %y = kiln.rope %x, %p {theta = 1.0e+07 : f64} : tensor<8x6x33xbf16>, tensor<8xi32>
  return
}

// -----

func.func @rope_positions(%x: tensor<8x6x32xbf16>, %p: tensor<4xi32>) {
  // expected-error @+1 {{positions dimension 0 must be 8 (one position per token)}}
  %y = kiln.rope %x, %p {theta = 1.0e+07 : f64} : tensor<8x6x32xbf16>, tensor<4xi32>
  return
}

// -----

func.func @attention_gqa(%q: tensor<8x6x32xbf16>, %k: tensor<8x4x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{query heads (6) must be a multiple of KV heads (4) for grouped-query attention}}
  %a = kiln.attention %q, %k, %k, %p {scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x4x32xbf16>, tensor<8x4x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_window(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{window must be a positive number of positions, got 0}}
  %a = kiln.attention %q, %k, %k, %p {scale = 0.125 : f64, window = 0 : i64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x16xbf16>, %v: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{k dimension 2 must be 32 (the queries' head_dim)}}
  %a = kiln.attention %q, %k, %v, %p {scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x16xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_scale(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{scale must be positive and finite, got -1}}
  %a = kiln.attention %q, %k, %k, %p {scale = -1.0 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_kv_type(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{kv_type must be f32, bf16 or f8E4M3FN (the KV cache's element type), got 'f16'}}
  %a = kiln.attention %q, %k, %k, %p {kv_type = f16, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_scales_without_fp8(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{kv_scales are an FP8 cache's only (kv_type f8E4M3FN)}}
  %a = kiln.attention %q, %k, %k, %p {kv_type = bf16, kv_scales = array<f64: 1.0, 1.0>, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_scales_count(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{kv_scales must be two scales (keys, values), got 1}}
  %a = kiln.attention %q, %k, %k, %p {kv_type = f8E4M3FN, kv_scales = array<f64: 0.5>, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @attention_scales_positive(%q: tensor<8x6x32xbf16>, %k: tensor<8x2x32xbf16>, %p: tensor<8xi32>) {
  // expected-error @+1 {{kv_scales must be positive and finite, got 0}}
  %a = kiln.attention %q, %k, %k, %p {kv_type = f8E4M3FN, kv_scales = array<f64: 0.5, 0.0>, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  return
}

// -----

func.func @router_k_too_large(%l: tensor<8x16xf32>) {
  // expected-error @+1 {{k (32) must not exceed the number of experts (16)}}
  %w, %i = kiln.router_topk %l {k = 32 : i64} : tensor<8x16xf32> -> tensor<8x32xf32>, tensor<8x32xi32>
  return
}

// -----

func.func @router_result_shape(%l: tensor<8x16xf32>) {
  // expected-error @+1 {{indices dimension 1 must be 4 (k)}}
  %w, %i = kiln.router_topk %l {k = 4 : i64} : tensor<8x16xf32> -> tensor<8x4xf32>, tensor<8x2xi32>
  return
}

// -----

func.func @router_logits_f32(%l: tensor<8x16xbf16>) {
  // expected-error @+1 {{operand #0 must be ranked tensor of 32-bit float values}}
  %w, %i = kiln.router_topk %l {k = 4 : i64} : tensor<8x16xbf16> -> tensor<8x4xf32>, tensor<8x4xi32>
  return
}

// -----

func.func @swiglu_experts(%z: tensor<8x128xbf16>, %i: tensor<8x4xi32>, %g: tensor<16x128x128xbf16>, %d: tensor<8x128x128xbf16>) {
  // expected-error @+1 {{down dimension 0 must be 16 (the gate's experts)}}
  %y = kiln.expert_swiglu %z, %i, %g, %g, %d
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<16x128x128xbf16>, tensor<16x128x128xbf16>,
           tensor<8x128x128xbf16> -> tensor<8x4x128xbf16>
  return
}

// -----

func.func @swiglu_latent(%z: tensor<8x64xbf16>, %i: tensor<8x4xi32>, %g: tensor<16x128x128xbf16>) {
  // expected-error @+1 {{gate dimension 2 must be 64 (the input's latent width)}}
  %y = kiln.expert_swiglu %z, %i, %g, %g, %g
         : tensor<8x64xbf16>, tensor<8x4xi32>, tensor<16x128x128xbf16>, tensor<16x128x128xbf16>,
           tensor<16x128x128xbf16> -> tensor<8x4x64xbf16>
  return
}

// -----

func.func @expert_norm_slots(%y: tensor<8x4x128xbf16>, %i: tensor<8x2xi32>, %w: tensor<16x128xbf16>) {
  // expected-error @+1 {{indices dimension 1 must be 4 (the input's k slots)}}
  %n = kiln.expert_norm %y, %i, %w {eps = 1.0e-05 : f64} : tensor<8x4x128xbf16>, tensor<8x2xi32>, tensor<16x128xbf16>
  return
}

// -----

func.func @combine_weights(%y: tensor<8x4x128xbf16>, %w: tensor<8x8xf32>) {
  // expected-error @+1 {{weights dimension 1 must be 4 (the input's k slots)}}
  %s = kiln.combine %y, %w : tensor<8x4x128xbf16>, tensor<8x8xf32> -> tensor<8x128xbf16>
  return
}

// -----

func.func @embed_width(%t: tensor<1024x256xbf16>, %ids: tensor<8xi32>) {
  // expected-error @+1 {{result dimension 1 must be 256 (the table's width)}}
  %x = kiln.embed %t, %ids : tensor<1024x256xbf16>, tensor<8xi32> -> tensor<8x128xbf16>
  return
}

// -----

func.func @logits_last_only(%x: tensor<8x256xbf16>, %h: tensor<1024x256xbf16>) {
  // expected-error @+1 {{result dimension 0 must be 1 (last_only keeps one row)}}
  %l = kiln.logits %x, %h {last_only} : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<8x1024xf32>
  return
}

// -----

func.func @nvfp4_packing(%p: tensor<64x64xui8>, %s: tensor<64x4xf8E4M3FN>, %g: tensor<f32>) {
  // expected-error @+1 {{packed dimension 1 must be 32 (two E2M1 values a byte)}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<64x64xui8>, tensor<64x4xf8E4M3FN>, tensor<f32> -> tensor<64x64xbf16>
  return
}

// -----

func.func @nvfp4_scales(%p: tensor<64x32xui8>, %s: tensor<64x2xf8E4M3FN>, %g: tensor<f32>) {
  // expected-error @+1 {{scales dimension 1 must be 4 (one scale per 16 values)}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<64x32xui8>, tensor<64x2xf8E4M3FN>, tensor<f32> -> tensor<64x64xbf16>
  return
}

// -----

func.func @nvfp4_global_per_expert(%p: tensor<4x64x32xui8>, %s: tensor<4x64x4xf8E4M3FN>, %g: tensor<2xf32>) {
  // expected-error @+1 {{global dimension 0 must be 4 (one scale per matrix)}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<4x64x32xui8>, tensor<4x64x4xf8E4M3FN>, tensor<2xf32> -> tensor<4x64x64xbf16>
  return
}

// -----

func.func @nvfp4_group(%p: tensor<64x4xui8>, %s: tensor<64x0xf8E4M3FN>, %g: tensor<f32>) {
  // expected-error @+1 {{input dimension 8 must be a multiple of 16}}
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<64x4xui8>, tensor<64x0xf8E4M3FN>, tensor<f32> -> tensor<64x8xbf16>
  return
}
