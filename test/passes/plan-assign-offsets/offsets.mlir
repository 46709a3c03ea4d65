// Memory planning: liveness decides which buffers may share bytes.
// RUN: kiln-opt %s -plan-assign-offsets -split-input-file | FileCheck %s

// A chain a -> b -> c: b overlaps a and c, but c may reuse a's bytes.
// CHECK-LABEL: plan.entry @chain
// CHECK-SAME: arena_bytes = 2048
// CHECK: %[[A:.+]] = plan.alloc {{.+}} f32 {offset = 0 : i64}
// CHECK: %[[B:.+]] = plan.alloc {{.+}} f32 {offset = 1024 : i64}
// CHECK: %[[C:.+]] = plan.alloc {{.+}} f32 {offset = 0 : i64}
plan.entry @chain attributes {max_tokens = 16 : i64} {
  %w = plan.binding "weight" 0 [#plan.dim<16, 0, 1>] f32
  %a = plan.alloc [#plan.dim<0, 1, 1>, #plan.dim<16, 0, 1>] f32
  plan.launch @k(%w, %a) scalars ["tokens:0"] {max_parts = 1 : i64, op = "a"}
  %b = plan.alloc [#plan.dim<0, 1, 1>, #plan.dim<16, 0, 1>] f32
  plan.launch @k(%a, %b) scalars ["tokens:0"] {max_parts = 1 : i64, op = "b"}
  %c = plan.alloc [#plan.dim<0, 1, 1>, #plan.dim<16, 0, 1>] f32
  plan.launch @k(%b, %c) scalars ["tokens:0"] {max_parts = 1 : i64, op = "c"}
}

// -----

// A view keeps its source alive: a is read through %v after b is made, so b
// cannot take a's bytes. Sizes follow max_tokens and alignment: 3 tokens
// rounded to 16 rows of 8 bf16 = 256 bytes.
// CHECK-LABEL: plan.entry @view
// CHECK-SAME: arena_bytes = 512
// CHECK: plan.alloc {{.+}} bf16 {offset = 0 : i64}
// CHECK: plan.alloc {{.+}} bf16 {offset = 256 : i64}
plan.entry @view attributes {max_tokens = 3 : i64} {
  %a = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<8, 0, 1>] bf16
  plan.launch @k(%a) scalars [] {max_parts = 1 : i64, op = "a"}
  %v = plan.view %a[0] [#plan.dim<0, 1, 16>, #plan.dim<2, 0, 1>, #plan.dim<4, 0, 1>] bf16
  %b = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<8, 0, 1>] bf16
  plan.launch @k(%v, %b) scalars ["part", "parts"] {max_parts = 4 : i64, op = "b"}
}

// -----

// Offsets are 64-byte aligned even for odd sizes: 3 x i32 = 12 bytes.
// CHECK-LABEL: plan.entry @align
// CHECK-SAME: arena_bytes = 128
// CHECK: plan.alloc {{.+}} i32 {offset = 0 : i64}
// CHECK: plan.alloc {{.+}} i32 {offset = 64 : i64}
plan.entry @align attributes {max_tokens = 3 : i64} {
  %a = plan.alloc [#plan.dim<0, 1, 1>] i32
  %b = plan.alloc [#plan.dim<0, 1, 1>] i32
  plan.launch @k(%a, %b) scalars [] {max_parts = 1 : i64, op = "ab"}
}
