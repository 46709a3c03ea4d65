// The plan dialect's verifiers.
// RUN: kiln-opt %s -split-input-file -verify-diagnostics

plan.entry @zero attributes {max_tokens = 1 : i64} {
  // expected-error @+1 {{a dimension's alignment must be at least 1, got 0}}
  %a = plan.alloc [#plan.dim<1, 0, 0>] f32
}

// -----

plan.entry @kind attributes {max_tokens = 1 : i64} {
  // expected-error @+1 {{kind must be weight, kv, input, output or exchange, got 'scratch'}}
  %a = plan.binding "scratch" 0 [#plan.dim<1, 0, 1>] f32
}

// -----

module attributes {plan.comm_groups = [{exchange_bytes = 512 : i64, name = "tp[1, 2]", ranks = array<i64: 0, 1>, size = 2 : i64}]} {
  plan.entry @exchange_group attributes {max_tokens = 1 : i64} {
    // expected-error @+1 {{names comm group 1, but the module's plan.comm_groups has 1}}
    %a = plan.binding "exchange" 1 [#plan.dim<2, 0, 1>] i64
  }
}

// -----

module attributes {plan.comm_groups = [{exchange_bytes = 512 : i64, name = "tp[1, 2]", ranks = array<i64: 0, 1>, size = 2 : i64}]} {
  plan.entry @exchange_shape attributes {max_tokens = 1 : i64} {
    // expected-error @+1 {{an exchange table is [members] i64, one address per member of its comm group}}
    %a = plan.binding "exchange" 0 [#plan.dim<4, 0, 1>] i64
  }
}

// -----

plan.entry @scalar attributes {max_tokens = 1 : i64} {
  %a = plan.alloc [#plan.dim<1, 0, 1>] f32
  // expected-error @+1 {{scalar 'tokens' must be const:N, tokens:N, past:N, group:N, seq:N, tmap:B:X,Y:S, part or parts}}
  plan.launch @k(%a) scalars ["tokens"] {max_parts = 1 : i64, op = "x"}
}

// -----

// expected-error @+1 {{max_tokens must be at least 1, got 0}}
plan.entry @empty attributes {max_tokens = 0 : i64} {
}

// -----

plan.entry @misaligned attributes {max_tokens = 1 : i64} {
  // expected-error @+1 {{offset 8 is not 64-byte aligned}}
  %a = plan.alloc [#plan.dim<1, 0, 1>] f32 {offset = 8 : i64}
}

// -----

// expected-error @+1 {{sequences (4) must be at least 2 and, times sequence_rows (1), equal max_tokens (8): token t continues conversation t / sequence_rows}}
plan.entry @batch attributes {max_tokens = 8 : i64, sequences = 4 : i64} {
}

// -----

// expected-error @+1 {{sequences (4) must be at least 2 and, times sequence_rows (4), equal max_tokens (8)}}
plan.entry @verify_batch attributes {max_tokens = 8 : i64, sequences = 4 : i64, sequence_rows = 4 : i64} {
}

// -----

// expected-error @+1 {{sequence_rows (2) must be at least 1, and goes with sequences}}
plan.entry @rows attributes {max_tokens = 8 : i64, sequence_rows = 2 : i64} {
}

// -----

module {
  plan.entry @decode attributes {max_tokens = 1 : i64} {
    %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] f32
    %y = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] f32
    // expected-error @+1 {{names comm group 0, but the module's plan.comm_groups has 0}}
    plan.collective "all_reduce" %x to %y group 0 axis 0 {op = "o_proj"}
  }
}

// -----

module attributes {plan.comm_groups = [{name = "tp[1]", ranks = array<i64: 0, 1>, size = 2 : i64}]} {
  plan.entry @decode attributes {max_tokens = 1 : i64} {
    %x = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] f32
    %y = plan.alloc [#plan.dim<0, 1, 16>, #plan.dim<64, 0, 1>] f32
    // expected-error @+1 {{kind must be all_reduce, all_gather or reduce_scatter, got 'broadcast'}}
    plan.collective "broadcast" %x to %y group 0 axis 0 {op = "o_proj"}
  }
}

// -----

// expected-error @+1 {{token_split must be at least 2, got 1}}
plan.entry @split attributes {max_tokens = 8 : i64, token_split = 1 : i64} {
}

// -----

// expected-error @+1 {{token_split and sequences exclude each other}}
plan.entry @both attributes {max_tokens = 8 : i64, sequences = 8 : i64, token_split = 2 : i64} {
}
