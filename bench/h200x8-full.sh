#!/usr/bin/env bash
# Issue 9's run: Muse Spark Open 816B-A42B on eight H200s, TP8/EP8 with
# sequence-parallel prefill, NVFP4 experts as W4A16 and BF16 elsewhere,
# synthetic weights made on the GPUs by the artifact's synthesis kernels:
# decode at batch 1 and 64 with 8K tokens of context each, and the time to
# first token of an 80K-token prompt, each beside its HBM roofline measured in
# the same run (kiln-bench-decode).
#   bench/h200x8-full.sh BIN_DIR OUT_DIR [CONFIG] [RANKS]
# CONFIG (default muse-spark-open-816b-a42b) and RANKS (default 8): a config of
# fewer layers and 2 ranks is the same run on two GPUs. BIN_DIR holds kiln-bench-decode
# and, unless the artifacts are already in OUT_DIR, kilnc.
set -euo pipefail
BIN=$1
OUT=$2
CONFIG=${3:-muse-spark-open-816b-a42b}
RANKS=${4:-8}
mkdir -p "$OUT"
layout="--target=sm_90 --tp $RANKS --ep $RANKS --sp --quant=nvfp4 --max-prefill-tokens=8192"
# Decode: one conversation, and 64 stepped together (the decode_batch entry).
# TTFT: an artifact without the batch entry, so that the KV cache holds one
# conversation of 80K tokens.
# shellcheck disable=SC2086
[ -e "$OUT/decode.kiln" ] || "$BIN/kilnc" "$CONFIG" $layout --decode-batch=64 --progress --report -o "$OUT/decode.kiln"
# shellcheck disable=SC2086
[ -e "$OUT/ttft.kiln" ] || "$BIN/kilnc" "$CONFIG" $layout --progress -o "$OUT/ttft.kiln"
echo "== decode, batch 1 and 64, 8192 tokens of context each"
"$BIN/kiln-bench-decode" "$OUT/decode.kiln" --weights synthetic:1 --context 8192 --steps 32 \
  --nproc "$RANKS" --json "$OUT/decode.json"
echo "== time to first token of an 81920-token prompt (prefill in chunks of 8192)"
"$BIN/kiln-bench-decode" "$OUT/ttft.kiln" --weights synthetic:1 --context 81920 --steps 8 \
  --nproc "$RANKS" --json "$OUT/ttft.json"
