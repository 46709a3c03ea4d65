// "tmap:B:X,Y[,...]:S" scalars (CUDA tensor maps, schema 1.5): a valid
// launch prints back; the verifier names what is wrong with the others.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: plan.entry @gemm
// CHECK: plan.launch @wgmma(%{{.*}}, %{{.*}}, %{{.*}}) scalars ["tokens:0", "tmap:0:64,128:128", "tmap:1:64,256:128", "tmap:2:16,4,2:0"]
plan.entry @gemm attributes {max_tokens = 128 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 128>, #plan.dim<4096, 0, 1>] bf16
  %w = plan.binding "weight" 0 [#plan.dim<1024, 0, 1>, #plan.dim<4096, 0, 1>] bf16
  %y = plan.alloc [#plan.dim<0, 1, 128>, #plan.dim<8, 0, 1>, #plan.dim<128, 0, 1>] f32
  plan.launch @wgmma(%x, %w, %y) scalars ["tokens:0", "tmap:0:64,128:128", "tmap:1:64,256:128", "tmap:2:16,4,2:0"] {max_parts = 1 : i64, op = "model.layers.0.mlp.up_proj", grid = #plan.dim<0, 1, 128>, block = 384 : i64}
}

// -----

plan.entry @buffer attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:1:64,16:128' maps buffer 1, but the launch has 1 buffers}}
  plan.launch @k(%x) scalars ["tmap:1:64,16:128"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @box attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:64,0:128': box sides must be positive, got 0}}
  plan.launch @k(%x) scalars ["tmap:0:64,0:128"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @negative attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:-8,16:0': box sides must be positive, got -8}}
  plan.launch @k(%x) scalars ["tmap:0:-8,16:0"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @swizzle attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:64,16:256': swizzle must be 0, 32, 64 or 128 bytes, got 256}}
  plan.launch @k(%x) scalars ["tmap:0:64,16:256"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @rank attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:64,16,1:0': a box of 3 sides for buffer 0 of rank 2}}
  plan.launch @k(%x) scalars ["tmap:0:64,16,1:0"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @missing_swizzle attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:64,16' must be tmap:B:X,Y[,...]:S (buffer operand B, the box innermost first, swizzle S bytes)}}
  plan.launch @k(%x) scalars ["tmap:0:64,16"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @empty_side attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:0:64,:128' must be tmap:B:X,Y[,...]:S}}
  plan.launch @k(%x) scalars ["tmap:0:64,:128"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}

// -----

plan.entry @not_a_number attributes {max_tokens = 1 : i64} {
  %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] bf16
  // expected-error @+1 {{scalar 'tmap:x:64,16:0' must be tmap:B:X,Y[,...]:S}}
  plan.launch @k(%x) scalars ["tmap:x:64,16:0"] {max_parts = 1 : i64, op = "x", grid = #plan.dim<1, 0, 1>, block = 128 : i64}
}
