// Layouts sequence parallelism refuses, with the reason.
// RUN: kilnc muse-spark-tiny --emit=model --tokens=6 -o %t.6.mlir
// RUN: kilnc muse-spark-tiny --emit=model --tokens=8 -o %t.8.mlir
// RUN: not kiln-opt %t.8.mlir -kiln-insert-sp-collectives 2>&1 | FileCheck %s --check-prefix=NOTP
// RUN: not kiln-opt %t.6.mlir -kiln-shard="tp=4" -kiln-insert-sp-collectives 2>&1 | FileCheck %s --check-prefix=HEADS
// RUN: kilnc muse-spark-tiny --emit=model --tokens=5 -o %t.5.mlir
// RUN: not kiln-opt %t.5.mlir -kiln-shard="tp=2" -kiln-insert-sp-collectives 2>&1 | FileCheck %s --check-prefix=TOKENS
// RUN: not kiln-opt %t.8.mlir -kiln-shard="tp=2" -kiln-shard-pooler -kiln-insert-sp-collectives 2>&1 | FileCheck %s --check-prefix=POOLER
// RUN: not kiln-opt %t.8.mlir -kiln-shard="tp=2 ep=2" -kiln-insert-sp-collectives 2>&1 | FileCheck %s --check-prefix=UNFUSED

// NOTP: error: kiln-insert-sp-collectives splits tokens over the TP group: run kiln-shard with tp > 1 first
// HEADS: error: 'kiln.attention' op TP 4 does not divide the 6 query heads
// TOKENS: error: 'kiln.attention' op sequence parallelism over 2 ranks needs a static token count divisible by 2, got 5
// POOLER: error: 'shard.all_gather' op splits features over the TP group (kiln-shard-pooler); under sequence parallelism the pooler and unpooler run on each rank's token shard instead
// UNFUSED: error: 'shard.all_reduce' op sums an expert-parallel stage whose tokens would differ between ranks under SP: run kiln-form-megamoe first
