#!/usr/bin/env bash
# Prefill attention beside PyTorch's SDPA on the same shapes in the same run
# (issue 21): the proxy's global (causal) layer at 4096 and 32768 tokens in one
# prefill call, Kiln's kernel time taken from kiln-bench-decode's launch-by-launch
# profile of that call, both as a share of the bf16 matmul rate measured here.
#   bench/h200-attention.sh BIN_DIR PROXY_4K_ARTIFACT PROXY_32K_ARTIFACT
# The artifacts, on a machine with the compiler:
#   kilnc bench/configs/muse-spark-open-4-layers.json --target=sm_90 --quant=nvfp4 \
#     --max-prefill-tokens=N -o proxy-N.kiln        (N = 4096, 32768)
# On a GPU of 80 GB (an H100) the 32768-token artifact does not fit beside the
# proxy's 256 experts a layer; muse-spark-open-4-layers-16-experts.json has the
# same attention (shapes, window, layer pattern) and 16 experts, and fits.
set -euo pipefail
BIN=$1
torch_out=$(python3 "$(dirname "$0")/torch_sdpa.py" 4096 32768)
echo "$torch_out"
tflops=$(echo "$torch_out" | sed -n 's/^torch bf16 matmul 8192^3: \([0-9.]*\) TFLOP\/s$/\1/p')
for pair in "4096 $2" "32768 $3"; do
  set -- $pair
  t=$1
  us=$("$BIN/kiln-bench-decode" "$2" --weights synthetic:1 --context "$t" --steps 2 |
    sed -n '/one prefill call/,$p' | awk '/kiln_attention_wgmma_.*_global/ {print $3; exit}')
  awk -v t="$t" -v us="$us" -v peak="$tflops" 'BEGIN {
    flop = 4 * 96 * 128 * t * (t + 1) / 2; rate = flop / (us * 1e-6) / 1e12;
    printf "kiln attention causal 96/8x128 at %d tokens: %.3f ms, %.0f TFLOP/s, %.1f%% of %s TFLOP/s\n",
      t, us / 1000, rate, 100 * rate / peak, peak }'
done
