#!/usr/bin/env bash
# This CPU's figures, each beside its yardstick from the same run: Kiln's GEMM
# family against oneDNN on the test configs' shapes, then muse-spark-tiny and
# muse-spark-small (NVFP4 experts) compiled for this CPU (--cpu=host), their
# prefill and decode speed beside the host's memory copy bandwidth.
#   bench/x86-cpu.sh [BUILD_DIR]        (default: build)
set -euo pipefail
BIN=${1:-build}/bin
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$BIN/kiln-bench-x86-gemm" --reps 60
for config in muse-spark-tiny muse-spark-small; do
  echo
  echo "== $config, NVFP4 experts, compiled for this CPU"
  "$BIN/kilnc" "$config" --target=x86 --cpu=host --quant=nvfp4 -o "$work/$config.kiln"
  "$BIN/kiln-bench-decode" "$work/$config.kiln" --context 256 --steps 32 2>/dev/null |
    grep -E '^(device|yardstick|prefill|decode|roofline) '
done
