// Layouts kiln-shard cannot make, each with a reason.
// RUN: not kiln-opt %S/Inputs/layer.mlir -kiln-shard="tp=3" 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: not kiln-opt %S/Inputs/layer.mlir -kiln-shard="ep=8" 2>&1 | FileCheck %s --check-prefix=EXPERTS
// RUN: not kiln-opt %S/Inputs/layer.mlir -kiln-shard="tp=2 ep=3" 2>&1 | FileCheck %s --check-prefix=LAYOUT
// RUN: not kiln-opt %S/Inputs/layer.mlir -kiln-shard="tp=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// HEADS: error: 'kiln.attention' op TP 3 does not divide the 4 query heads
// EXPERTS: error: 'kiln.expert_swiglu' op EP 8 does not divide the 4 experts
// LAYOUT: error: kiln-shard: TP (2) and EP (3) share max(TP, EP) devices, so one must divide the other
// ZERO: error: kiln-shard: tp and ep must be at least 1, got tp=0 ep=1
