#!/usr/bin/env bash
# The issue-10 benchmark on a machine with an NVIDIA GPU: the full-width
# 4-layer proxy of Muse Spark Open (bench/configs/muse-spark-open-4-layers.json,
# NVFP4 experts, synthetic weights, KV length 4096), first as PyTorch eager
# (the yardstick, which also measures the bf16 tensor-core rate), then through
# Kiln with that rate as the prefill roofline. One run, one GPU, in turn.
#   bench/h200-proxy.sh BIN_DIR ARTIFACT
# ARTIFACT comes from, on a machine with the compiler:
#   kilnc bench/configs/muse-spark-open-4-layers.json --target=sm_90 --quant=nvfp4 \
#     --max-prefill-tokens=4096 --decode-batch=8 -o proxy.kiln
set -euo pipefail
BIN=$1
ARTIFACT=$2
CONFIG=$(dirname "$0")/configs/muse-spark-open-4-layers.json
echo "== PyTorch eager, the same layers"
torch_out=$(python3 "$(dirname "$0")/torch_eager_proxy.py" "$CONFIG" --context 4096 --prefill 4096)
echo "$torch_out"
tflops=$(echo "$torch_out" | sed -n 's/^torch bf16 matmul 8192^3: \([0-9.]*\) TFLOP\/s$/\1/p')
echo "== Kiln"
"$BIN/kiln-bench-decode" "$ARTIFACT" --weights synthetic:1 --context 4096 --steps 32 \
  --tensor-tflops "${tflops:-0}" "${@:3}"
