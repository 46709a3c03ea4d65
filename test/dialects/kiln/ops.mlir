// Every kiln op parses, verifies and prints back to the same text, in the
// custom and in the generic form.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// CHECK-LABEL: func.func @attention_block
func.func @attention_block(%ids: tensor<8xi32>, %pos: tensor<8xi32>) -> tensor<8x256xbf16> {
  // CHECK: %[[TABLE:.+]] = kiln.weight "model.embed_tokens.weight" : tensor<1024x256xbf16>
  %table = kiln.weight "model.embed_tokens.weight" : tensor<1024x256xbf16>
  // CHECK: %[[X:.+]] = kiln.embed %[[TABLE]], %{{.+}} : tensor<1024x256xbf16>, tensor<8xi32> -> tensor<8x256xbf16>
  %x = kiln.embed %table, %ids : tensor<1024x256xbf16>, tensor<8xi32> -> tensor<8x256xbf16>
  %nw = kiln.weight "model.layers.0.input_layernorm.weight" : tensor<256xbf16>
  // CHECK: kiln.rms_norm %[[X]], %{{.+}} {eps = 1.000000e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
  %n = kiln.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<8x256xbf16>, tensor<256xbf16>
  %wq = kiln.weight "model.layers.0.self_attn.q_proj.weight" : tensor<192x256xbf16>
  %wk = kiln.weight "model.layers.0.self_attn.k_proj.weight" : tensor<64x256xbf16>
  %wv = kiln.weight "model.layers.0.self_attn.v_proj.weight" : tensor<64x256xbf16>
  // CHECK: kiln.linear %{{.+}}, %{{.+}} : tensor<8x256xbf16>, tensor<192x256xbf16> -> tensor<8x192xbf16>
  %q = kiln.linear %n, %wq : tensor<8x256xbf16>, tensor<192x256xbf16> -> tensor<8x192xbf16>
  %k = kiln.linear %n, %wk : tensor<8x256xbf16>, tensor<64x256xbf16> -> tensor<8x64xbf16>
  %v = kiln.linear %n, %wv : tensor<8x256xbf16>, tensor<64x256xbf16> -> tensor<8x64xbf16>
  // CHECK: kiln.split_heads %{{.+}} : tensor<8x192xbf16> -> tensor<8x6x32xbf16>
  %q3 = kiln.split_heads %q : tensor<8x192xbf16> -> tensor<8x6x32xbf16>
  %k3 = kiln.split_heads %k : tensor<8x64xbf16> -> tensor<8x2x32xbf16>
  %v3 = kiln.split_heads %v : tensor<8x64xbf16> -> tensor<8x2x32xbf16>
  %qnw = kiln.weight "model.layers.0.self_attn.q_norm.weight" : tensor<32xbf16>
  // CHECK: kiln.head_norm %{{.+}}, %{{.+}} {eps = 1.000000e-05 : f64} : tensor<8x6x32xbf16>, tensor<32xbf16>
  %qn = kiln.head_norm %q3, %qnw {eps = 1.0e-05 : f64} : tensor<8x6x32xbf16>, tensor<32xbf16>
  // CHECK: kiln.rope %{{.+}}, %{{.+}} {theta = 1.000000e+07 : f64} : tensor<8x6x32xbf16>, tensor<8xi32>
  %qr = kiln.rope %qn, %pos {theta = 1.0e+07 : f64} : tensor<8x6x32xbf16>, tensor<8xi32>
  %kr = kiln.rope %k3, %pos {theta = 1.0e+07 : f64} : tensor<8x2x32xbf16>, tensor<8xi32>
  // CHECK: kiln.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {scale = 1.250000e-01 : f64, window = 4 : i64}
  %a = kiln.attention %qr, %kr, %v3, %pos {scale = 0.125 : f64, window = 4 : i64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  // A global layer has no window.
  // CHECK: kiln.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {scale = 1.250000e-01 : f64} :
  %g = kiln.attention %qr, %kr, %v3, %pos {scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  // A KV cache in bf16: keys and values rounded to it.
  // CHECK: kiln.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {kv_type = bf16, scale = 1.250000e-01 : f64} :
  %gb = kiln.attention %qr, %kr, %v3, %pos {kv_type = bf16, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  // A KV cache in FP8 e4m3 with a scale for the keys and one for the values.
  // CHECK: kiln.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {kv_scales = array<f64: 5.000000e-01, 2.500000e-01>, kv_type = f8E4M3FN, scale = 1.250000e-01 : f64} :
  %g8 = kiln.attention %qr, %kr, %v3, %pos {kv_type = f8E4M3FN, kv_scales = array<f64: 0.5, 0.25>, scale = 0.125 : f64}
         : tensor<8x6x32xbf16>, tensor<8x2x32xbf16>, tensor<8x2x32xbf16>, tensor<8xi32> -> tensor<8x6x32xbf16>
  // CHECK: kiln.merge_heads %{{.+}} : tensor<8x6x32xbf16> -> tensor<8x192xbf16>
  %a2 = kiln.merge_heads %a : tensor<8x6x32xbf16> -> tensor<8x192xbf16>
  %wo = kiln.weight "model.layers.0.self_attn.o_proj.weight" : tensor<256x192xbf16>
  %o = kiln.linear %a2, %wo : tensor<8x192xbf16>, tensor<256x192xbf16> -> tensor<8x256xbf16>
  %gate = kiln.weight "model.layers.0.attn_residual_gate" : tensor<256xbf16>
  // CHECK: kiln.mul %{{.+}}, %{{.+}} : tensor<8x256xbf16>, tensor<256xbf16>
  %og = kiln.mul %o, %gate : tensor<8x256xbf16>, tensor<256xbf16>
  // CHECK: kiln.add %[[X]], %{{.+}} : tensor<8x256xbf16>, tensor<8x256xbf16>
  %h = kiln.add %x, %og : tensor<8x256xbf16>, tensor<8x256xbf16>
  return %h : tensor<8x256xbf16>
}

// CHECK-LABEL: func.func @latent_moe
func.func @latent_moe(%u: tensor<8x256xbf16>) -> tensor<8x256xbf16> {
  %wr = kiln.weight "model.layers.0.mlp.router.weight" : tensor<16x256xbf16>
  %logits = kiln.linear %u, %wr : tensor<8x256xbf16>, tensor<16x256xbf16> -> tensor<8x16xf32>
  // CHECK: %[[W:.+]], %[[IDX:.+]] = kiln.router_topk %{{.+}} {k = 4 : i64} : tensor<8x16xf32> -> tensor<8x4xf32>, tensor<8x4xi32>
  %w, %idx = kiln.router_topk %logits {k = 4 : i64} : tensor<8x16xf32> -> tensor<8x4xf32>, tensor<8x4xi32>
  %wp = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<128x256xbf16>
  %z = kiln.linear %u, %wp : tensor<8x256xbf16>, tensor<128x256xbf16> -> tensor<8x128xbf16>
  // CHECK: kiln.weight "model.layers.0.mlp.experts.{e}.gate_proj.weight" : tensor<16x128x128xbf16>
  %gate = kiln.weight "model.layers.0.mlp.experts.{e}.gate_proj.weight" : tensor<16x128x128xbf16>
  %up = kiln.weight "model.layers.0.mlp.experts.{e}.up_proj.weight" : tensor<16x128x128xbf16>
  %down = kiln.weight "model.layers.0.mlp.experts.{e}.down_proj.weight" : tensor<16x128x128xbf16>
  // CHECK: %[[Y:.+]] = kiln.expert_swiglu %{{.+}}, %[[IDX]], %{{.+}}, %{{.+}}, %{{.+}} : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<16x128x128xbf16>, tensor<16x128x128xbf16>, tensor<16x128x128xbf16> -> tensor<8x4x128xbf16>
  %y = kiln.expert_swiglu %z, %idx, %gate, %up, %down
         : tensor<8x128xbf16>, tensor<8x4xi32>, tensor<16x128x128xbf16>, tensor<16x128x128xbf16>,
           tensor<16x128x128xbf16> -> tensor<8x4x128xbf16>
  %pn = kiln.weight "model.layers.0.mlp.experts.{e}.post_norm.weight" : tensor<16x128xbf16>
  // CHECK: %[[YN:.+]] = kiln.expert_norm %[[Y]], %[[IDX]], %{{.+}} {eps = 1.000000e-05 : f64} : tensor<8x4x128xbf16>, tensor<8x4xi32>, tensor<16x128xbf16>
  %yn = kiln.expert_norm %y, %idx, %pn {eps = 1.0e-05 : f64} : tensor<8x4x128xbf16>, tensor<8x4xi32>, tensor<16x128xbf16>
  // CHECK: kiln.combine %[[YN]], %[[W]] : tensor<8x4x128xbf16>, tensor<8x4xf32> -> tensor<8x128xbf16>
  %s = kiln.combine %yn, %w : tensor<8x4x128xbf16>, tensor<8x4xf32> -> tensor<8x128xbf16>
  %wu = kiln.weight "model.layers.0.mlp.unpooler.weight" : tensor<256x128xbf16>
  %m = kiln.linear %s, %wu : tensor<8x128xbf16>, tensor<256x128xbf16> -> tensor<8x256xbf16>
  return %m : tensor<8x256xbf16>
}

// CHECK-LABEL: func.func @nvfp4_experts
func.func @nvfp4_experts() -> tensor<16x128x128xbf16> {
  %packed = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight" : tensor<16x128x64xui8>
  %scales = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale" : tensor<16x128x8xf8E4M3FN>
  %global = kiln.weight "model.layers.1.mlp.experts.{e}.gate_proj.weight_scale_2" : tensor<16xf32>
  // CHECK: kiln.nvfp4_dequant %{{.+}}, %{{.+}}, %{{.+}} : tensor<16x128x64xui8>, tensor<16x128x8xf8E4M3FN>, tensor<16xf32> -> tensor<16x128x128xbf16>
  %w = kiln.nvfp4_dequant %packed, %scales, %global
         : tensor<16x128x64xui8>, tensor<16x128x8xf8E4M3FN>, tensor<16xf32> -> tensor<16x128x128xbf16>
  return %w : tensor<16x128x128xbf16>
}

// CHECK-LABEL: func.func @nvfp4_single_matrix
func.func @nvfp4_single_matrix(%p: tensor<64x32xui8>, %s: tensor<64x4xf8E4M3FN>, %g: tensor<f32>) -> tensor<64x64xf32> {
  // CHECK: kiln.nvfp4_dequant {{.+}} : tensor<64x32xui8>, tensor<64x4xf8E4M3FN>, tensor<f32> -> tensor<64x64xf32>
  %w = kiln.nvfp4_dequant %p, %s, %g : tensor<64x32xui8>, tensor<64x4xf8E4M3FN>, tensor<f32> -> tensor<64x64xf32>
  return %w : tensor<64x64xf32>
}

// CHECK-LABEL: func.func @head
func.func @head(%x: tensor<8x256xbf16>, %dyn: tensor<?x256xbf16>) -> (tensor<8x1024xf32>, tensor<1x1024xf32>, tensor<?x1024xf32>) {
  %head = kiln.weight "lm_head.weight" : tensor<1024x256xbf16>
  // CHECK: kiln.logits %{{.+}}, %{{.+}} : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<8x1024xf32>
  %all = kiln.logits %x, %head : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<8x1024xf32>
  // CHECK: kiln.logits %{{.+}}, %{{.+}} {last_only} : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<1x1024xf32>
  %last = kiln.logits %x, %head {last_only} : tensor<8x256xbf16>, tensor<1024x256xbf16> -> tensor<1x1024xf32>
  // A dynamic token count verifies too.
  // CHECK: kiln.logits %{{.+}}, %{{.+}} : tensor<?x256xbf16>, tensor<1024x256xbf16> -> tensor<?x1024xf32>
  %dynl = kiln.logits %dyn, %head : tensor<?x256xbf16>, tensor<1024x256xbf16> -> tensor<?x1024xf32>
  return %all, %last, %dynl : tensor<8x1024xf32>, tensor<1x1024xf32>, tensor<?x1024xf32>
}
