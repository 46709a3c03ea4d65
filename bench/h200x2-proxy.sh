#!/usr/bin/env bash
# Issue 6's benchmark on a machine with two NVIDIA GPUs: the full-width 4-layer
# proxy of Muse Spark Open (NVFP4 experts, synthetic weights) on one GPU, then
# on two in TP2+EP2 (decode's MegaMoE one persistent kernel exchanging through
# peer memory), then TP2+EP2 with sequence-parallel prefill, then TP2+EP2 with
# the expert combine as separate kernels and an NCCL all-reduce. Each prints
# prefill of 8192 tokens, decode at batch 1 and at batch 32 (KV 8192 each)
# beside its rank's HBM roofline measured in the same run, and the per-kernel
# profiles whose collective:* rows are the time in communication.
#   bench/h200x2-proxy.sh BIN_DIR ARTIFACT_DIR
# ARTIFACT_DIR holds, from a machine with the compiler:
#   for layout in one:"" tp2ep2:"--tp 2 --ep 2" tp2ep2sp:"--tp 2 --ep 2 --sp" \
#       tp2ep2coll:"--tp 2 --ep 2 --moe-exchange=collective"; do
#     kilnc bench/configs/muse-spark-open-4-layers.json --target=sm_90 --quant=nvfp4 \
#       --max-prefill-tokens=8192 --decode-batch=32 ${layout#*:} -o ARTIFACT_DIR/${layout%%:*}.kiln
#   done
set -euo pipefail
BIN=$1
DIR=$2
run() { # name, then kiln-bench-decode's extra arguments
  local name=$1
  shift
  echo "== $name"
  "$BIN/kiln-bench-decode" "$DIR/$name.kiln" --weights synthetic:1 --context 8192 --steps 32 \
    --json "$DIR/$name.json" "$@"
}
run one
run tp2ep2 --nproc 2
run tp2ep2sp --nproc 2
run tp2ep2coll --nproc 2
