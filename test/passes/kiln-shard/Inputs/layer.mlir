// One Muse Spark layer at toy sizes: T=4, H=16, 4 query / 2 KV heads of 4,
// 4 experts top-2, latent = intermediate = 8.
func.func @layer(%x: tensor<4x16xbf16>, %pos: tensor<4xi32>) -> tensor<4x16xbf16> {
  %nw = kiln.weight "model.layers.0.input_layernorm.weight" : tensor<16xbf16>
  %n = kiln.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<4x16xbf16>, tensor<16xbf16>
  %wq = kiln.weight "model.layers.0.self_attn.q_proj.weight" : tensor<16x16xbf16>
  %q = kiln.linear %n, %wq : tensor<4x16xbf16>, tensor<16x16xbf16> -> tensor<4x16xbf16>
  %wk = kiln.weight "model.layers.0.self_attn.k_proj.weight" : tensor<8x16xbf16>
  %k = kiln.linear %n, %wk : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
  %wv = kiln.weight "model.layers.0.self_attn.v_proj.weight" : tensor<8x16xbf16>
  %v = kiln.linear %n, %wv : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
  %q3 = kiln.split_heads %q : tensor<4x16xbf16> -> tensor<4x4x4xbf16>
  %qnw = kiln.weight "model.layers.0.self_attn.q_norm.weight" : tensor<4xbf16>
  %qn = kiln.head_norm %q3, %qnw {eps = 1.0e-05 : f64} : tensor<4x4x4xbf16>, tensor<4xbf16>
  %qr = kiln.rope %qn, %pos {theta = 1.0e+04 : f64} : tensor<4x4x4xbf16>, tensor<4xi32>
  %k3 = kiln.split_heads %k : tensor<4x8xbf16> -> tensor<4x2x4xbf16>
  %kr = kiln.rope %k3, %pos {theta = 1.0e+04 : f64} : tensor<4x2x4xbf16>, tensor<4xi32>
  %v3 = kiln.split_heads %v : tensor<4x8xbf16> -> tensor<4x2x4xbf16>
  %a = kiln.attention %qr, %kr, %v3, %pos {scale = 0.5 : f64, window = 2 : i64}
         : tensor<4x4x4xbf16>, tensor<4x2x4xbf16>, tensor<4x2x4xbf16>, tensor<4xi32> -> tensor<4x4x4xbf16>
  %a2 = kiln.merge_heads %a : tensor<4x4x4xbf16> -> tensor<4x16xbf16>
  %wo = kiln.weight "model.layers.0.self_attn.o_proj.weight" : tensor<16x16xbf16>
  %o = kiln.linear %a2, %wo : tensor<4x16xbf16>, tensor<16x16xbf16> -> tensor<4x16xbf16>
  %h = kiln.add %x, %o : tensor<4x16xbf16>, tensor<4x16xbf16>
  %wr = kiln.weight "model.layers.0.mlp.router.weight" : tensor<4x16xbf16>
  %logits = kiln.linear %h, %wr : tensor<4x16xbf16>, tensor<4x16xbf16> -> tensor<4x4xf32>
  %w, %idx = kiln.router_topk %logits {k = 2 : i64} : tensor<4x4xf32> -> tensor<4x2xf32>, tensor<4x2xi32>
  %wp = kiln.weight "model.layers.0.mlp.pooler.weight" : tensor<8x16xbf16>
  %z0 = kiln.linear %h, %wp : tensor<4x16xbf16>, tensor<8x16xbf16> -> tensor<4x8xbf16>
  %zw = kiln.weight "model.layers.0.mlp.expert_input_norm.weight" : tensor<8xbf16>
  %z = kiln.rms_norm %z0, %zw {eps = 1.0e-05 : f64} : tensor<4x8xbf16>, tensor<8xbf16>
  %gate = kiln.weight "model.layers.0.mlp.experts.{e}.gate_proj.weight" : tensor<4x8x8xbf16>
  %up = kiln.weight "model.layers.0.mlp.experts.{e}.up_proj.weight" : tensor<4x8x8xbf16>
  %down = kiln.weight "model.layers.0.mlp.experts.{e}.down_proj.weight" : tensor<4x8x8xbf16>
  %y = kiln.expert_swiglu %z, %idx, %gate, %up, %down
         : tensor<4x8xbf16>, tensor<4x2xi32>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16>, tensor<4x8x8xbf16> -> tensor<4x2x8xbf16>
  %pn = kiln.weight "model.layers.0.mlp.experts.{e}.post_norm.weight" : tensor<4x8xbf16>
  %yn = kiln.expert_norm %y, %idx, %pn {eps = 1.0e-05 : f64} : tensor<4x2x8xbf16>, tensor<4x2xi32>, tensor<4x8xbf16>
  %s = kiln.combine %yn, %w : tensor<4x2x8xbf16>, tensor<4x2xf32> -> tensor<4x8xbf16>
  %wu = kiln.weight "model.layers.0.mlp.unpooler.weight" : tensor<16x8xbf16>
  %m = kiln.linear %s, %wu : tensor<4x8xbf16>, tensor<16x8xbf16> -> tensor<4x16xbf16>
  %out = kiln.add %h, %m : tensor<4x16xbf16>, tensor<4x16xbf16>
  return %out : tensor<4x16xbf16>
}
