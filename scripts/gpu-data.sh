#!/usr/bin/env bash
# Prepares what the GPU checks need, on a machine with the compiler (MLIR) but
# possibly no GPU: sm_90 artifacts of muse-spark-tiny (BF16, NVFP4) and
# muse-spark-small (NVFP4, BF16), the tiny checkpoints, and the fp32 interpreter's
# reference runs (64 greedy steps each), with the artifacts' bf16 KV cache; tiny
# BF16 also with an f32 cache (kilnc and kiln-interp --kv-dtype=f32), whose
# batched decode must match each conversation alone to 5e-5.
#   scripts/gpu-data.sh [OUT_DIR]      (default: build/gpu-data)
source "$(dirname "$0")/lib.sh"

OUT=${1:-$KILN_BUILD/gpu-data}
BIN=$KILN_BUILD/bin
STEPS=${KILN_GPU_STEPS:-64}
PROMPT=$(seq -s, 1 24)
mkdir -p "$OUT"
for format in bf16 nvfp4; do
  quant=$([ $format = bf16 ] && echo none || echo nvfp4)
  kiln_log "tiny $format: checkpoint, interpreter reference ($STEPS steps), sm_90 artifact"
  "$BIN/kiln-ckpt" synth muse-spark-tiny --format $format --seed 7 -o "$OUT/tiny-$format" >/dev/null
  "$BIN/kiln-interp" --weights "$OUT/tiny-$format" --prompt-ids "$PROMPT" --max-new-tokens "$STEPS" \
    --save-reference "$OUT/tiny-$format.reference"
  "$BIN/kilnc" muse-spark-tiny --target=sm_90 --quant=$quant --decode-batch=8 --verify-tokens=8 \
    -o "$OUT/tiny-$format.sm_90.kiln"
done
kiln_log "tiny bf16 with an f32 KV cache: reference, sm_90 artifact"
"$BIN/kiln-interp" --weights "$OUT/tiny-bf16" --kv-dtype=f32 --prompt-ids "$PROMPT" \
  --max-new-tokens "$STEPS" --save-reference "$OUT/tiny-bf16.f32kv.reference"
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --kv-dtype=f32 --decode-batch=8 \
  -o "$OUT/tiny-bf16.f32kv.sm_90.kiln"
# Tiny's prefill on tensor cores (its p512 artifacts): references with the
# kernels' roundings for prompts of 24, 100 and 600 tokens (window 8, several
# key and query tiles, and two chunks); NVFP4 for the decoding expert GEMMs.
for format in bf16 nvfp4; do
  for n in 24 100 600; do
    "$BIN/kiln-interp" --weights "$OUT/tiny-$format" --prompt-ids "$(seq -s, 1 $n)" \
      --linear-inputs=bf16 --attention-inputs=bf16 --save-reference "$OUT/tiny-$format.bf16tc-$n.reference"
  done
done
# small: the interpreter needs about 35 s a step here (2 cores, fp32, whole
# prefix each step): 64 steps take about 40 minutes (KILN_GPU_SMALL_STEPS
# shortens it); it reads a checkpoint on disk, the GPU run the same bytes as
# synthetic:3.
SMALL_STEPS=${KILN_GPU_SMALL_STEPS:-64}
SMALL_CKPT=$(mktemp -d)
trap 'rm -rf "$SMALL_CKPT"' EXIT
for format in nvfp4 bf16; do
  quant=$([ $format = bf16 ] && echo none || echo nvfp4)
  kiln_log "small $format: checkpoint (temporary), interpreter reference ($SMALL_STEPS steps), sm_90 artifact"
  "$BIN/kiln-ckpt" synth muse-spark-small --format $format --seed 3 -o "$SMALL_CKPT" >/dev/null
  "$BIN/kiln-interp" --weights "$SMALL_CKPT" --prompt-ids "$PROMPT" --max-new-tokens "$SMALL_STEPS" \
    --save-reference "$OUT/small-$format.reference"
  "$BIN/kilnc" muse-spark-small --target=sm_90 --quant=$quant --decode-batch=8 --verify-tokens=8 \
    -o "$OUT/small-$format.sm_90.kiln"
  if [ $format = nvfp4 ]; then
    # The numerics of bf16 tensor-core inputs (the wgmma GEMMs and the
    # tensor-core attention of prefill entries): prefill logits of the same
    # prompt and of a 600-token one.
    kiln_log "small nvfp4: interpreter references with tensor-core numerics (24 and 600 tokens)"
    for prompt in "$PROMPT" "$(seq -s, 1 600)"; do
      suffix=$([ "$prompt" = "$PROMPT" ] && echo "" || echo "-600")
      "$BIN/kiln-interp" --weights "$SMALL_CKPT" --prompt-ids "$prompt" --linear-inputs=bf16 \
        --attention-inputs=bf16 --save-reference "$OUT/small-nvfp4.bf16tc$suffix.reference"
    done
  fi
  rm -rf "${SMALL_CKPT:?}"/*
done
# Two GPUs: one artifact for both ranks, in each parallel layout.
for format in nvfp4 bf16; do
  quant=$([ $format = bf16 ] && echo none || echo nvfp4)
  for layout in tp2 ep2 tp2ep2 tp2sp tp2ep2sp; do
    kiln_log "small $format $layout: sm_90 artifact for 2 ranks"
    flags=$(echo "$layout" | sed 's/tp2/--tp=2 /; s/ep2/--ep=2 /; s/sp$/--sp/')
    # shellcheck disable=SC2086
    "$BIN/kilnc" muse-spark-small --target=sm_90 --quant=$quant --decode-batch=8 $flags \
      -o "$OUT/small-$format.$layout.sm_90.kiln"
  done
done
# 64 conversations (small NVFP4, one GPU and TP2+EP2): batched decode's
# expert stage as grouped GEMVs and its head on tensor cores.
kiln_log "small nvfp4, 64 conversations: sm_90 artifacts for 1 and 2 ranks"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=64 \
  -o "$OUT/small-nvfp4.b64.sm_90.kiln"
# 24 conversations: batched decode's narrow tensor-core linears in three
# groups of 8 tokens.
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=24 --verify-tokens=8 \
  -o "$OUT/small-nvfp4.b24.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=64 --tp=2 --ep=2 \
  -o "$OUT/small-nvfp4.b64.tp2ep2.sm_90.kiln"
kiln_log "small nvfp4, prefill chunks of 512 (wgmma GEMMs), and one with a GEMM broken on purpose"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 --decode-batch=8 \
  -o "$OUT/small-nvfp4.p512.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 \
  --inject-fault=wgmma-drop-k-step -o "$OUT/small-nvfp4.p512-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 \
  --inject-fault=attention-drop-tile -o "$OUT/small-nvfp4.p512-attn-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 \
  --inject-fault=expert-drop-k-step -o "$OUT/small-nvfp4.p512-experts-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 \
  --inject-fault=expert-combine-drop-choice -o "$OUT/small-nvfp4.p512-combine-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=8 \
  --inject-fault=narrow-experts-drop-k-step -o "$OUT/small-nvfp4.narrow-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=8 --verify-tokens=8 \
  --inject-fault=staged-experts-drop-chunk -o "$OUT/small-nvfp4.staged-broken.sm_90.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 --decode-batch=8 --verify-tokens=8 \
  --inject-fault=gemv-pair-first-weight -o "$OUT/small-nvfp4.pair-broken.sm_90.kiln"
kiln_log "tiny bf16 and nvfp4, prefill chunks of 512 (wgmma GEMMs and experts; racecheck runs them)"
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --max-prefill-tokens=512 -o "$OUT/tiny-bf16.p512.sm_90.kiln"
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --quant=nvfp4 --max-prefill-tokens=512 \
  -o "$OUT/tiny-nvfp4.p512.sm_90.kiln"
# One chunk of 2000 tokens: 500 items an expert, so each expert fills one
# 256-item tile of the Hopper expert GEMMs and part of a second, all four of
# its 64-row blocks live (ids below tiny's vocabulary of 1024).
kiln_log "tiny bf16 and nvfp4, one prefill chunk of 2000 tokens: references, artifacts"
LONG_PROMPT=$(python3 -c "print(','.join(str(i % 1000 + 1) for i in range(1, 2001)))")
for format in bf16 nvfp4; do
  quant=$([ $format = bf16 ] && echo none || echo nvfp4)
  "$BIN/kiln-interp" --weights "$OUT/tiny-$format" --prompt-ids "$LONG_PROMPT" --linear-inputs=bf16 \
    --attention-inputs=bf16 --save-reference "$OUT/tiny-$format.bf16tc-2000.reference"
  "$BIN/kilnc" muse-spark-tiny --target=sm_90 --quant=$quant --max-prefill-tokens=2048 \
    -o "$OUT/tiny-$format.p2048.sm_90.kiln"
done
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --max-prefill-tokens=2048 \
  --inject-fault=expert-drop-k-step -o "$OUT/tiny-bf16.p2048-experts-broken.sm_90.kiln"
# Tiny widened to head_dim 64 and a window of 128 (tiny-wide), and to head_dim
# 128 (tiny-wide128: two 64-dim panels a key and value tile): their attention
# takes the wgmma kernel (tiny's 32 keeps mma.sync), with groups of three
# heads (a head's 128 queries a block) and a window of two 64-key tiles at
# head_dim 64, one 128-key tile at 128. tiny-pairs128: head_dim 128 with three
# KV heads, so groups of two (a block takes 64 queries of two heads of a KV
# head, each key tile serving both, as in small and the proxy), and a window
# of 256 (two 128-key tiles and the partly visible one at its edge).
# References with the kernels' roundings for 24, 100 and 600 tokens and for
# 8 decode steps after 1200. Prefill chunks of 500: the 600-token prompt's
# second chunk has cached tiles of all three kinds (by TMA from the cache,
# wrapped around a sliding ring's end, reaching below position 0; the last
# two converted).
for wide in "tiny-wide 64 128 2" "tiny-wide128 128 128 2" "tiny-pairs128 128 256 3"; do
  read -r name dim window kvHeads <<<"$wide"
  kiln_log "$name bf16 (head_dim $dim, window $window, $kvHeads KV heads): references, sm_90 p500 artifacts"
  sed -e "s/\"head_dim\": 32/\"head_dim\": $dim/" \
    -e "s/\"sliding_window\": 8/\"sliding_window\": $window/" \
    -e "s/\"num_key_value_heads\": 2/\"num_key_value_heads\": $kvHeads/" \
    "$KILN_ROOT/models/muse_spark/configs/muse-spark-tiny.json" > "$OUT/$name.json"
  # The checkpoint is temporary: the GPU makes the same bytes as synthetic:7.
  "$BIN/kiln-ckpt" synth "$OUT/$name.json" --format bf16 --seed 7 -o "$SMALL_CKPT" >/dev/null
  for n in 24 100 600; do
    "$BIN/kiln-interp" --weights "$SMALL_CKPT" --prompt-ids "$(seq -s, 1 $n)" \
      --linear-inputs=bf16 --attention-inputs=bf16 --save-reference "$OUT/$name.bf16tc-$n.reference"
  done
  # 1200 tokens and 8 decode steps, each step's logits kept (kiln-check
  # --step-tolerance holds the decode kernels to them).
  "$BIN/kiln-interp" --weights "$SMALL_CKPT" \
    --prompt-ids "$(python3 -c "print(','.join(str((37 * i + 11) % 1000 + 1) for i in range(1200)))")" \
    --max-new-tokens 8 --linear-inputs=bf16 --attention-inputs=bf16 \
    --save-reference "$OUT/$name.bf16tc-1200s.reference"
  rm -rf "${SMALL_CKPT:?}"/*
  "$BIN/kilnc" "$OUT/$name.json" --target=sm_90 --max-prefill-tokens=500 \
    -o "$OUT/$name.p500.sm_90.kiln"
  "$BIN/kilnc" "$OUT/$name.json" --target=sm_90 --max-prefill-tokens=500 \
    --inject-fault=attention-drop-tile -o "$OUT/$name.p500-attn-broken.sm_90.kiln"
done
kiln_log "tiny-wide128 with paged KV caches: pages of 16 (chunks of 500), of 64 (chunks of 512)"
"$BIN/kilnc" "$OUT/tiny-wide128.json" --target=sm_90 --max-prefill-tokens=500 --decode-batch=4 \
  --verify-tokens=4 --kv-page-tokens=16 -o "$OUT/tiny-wide128.p500-pg16-b4.sm_90.kiln"
"$BIN/kilnc" "$OUT/tiny-wide128.json" --target=sm_90 --max-prefill-tokens=512 --decode-batch=4 \
  --verify-tokens=4 --kv-page-tokens=64 -o "$OUT/tiny-wide128.p512-pg64-b4.sm_90.kiln"
"$BIN/kilnc" "$OUT/tiny-wide128.json" --target=sm_90 --max-prefill-tokens=512 --kv-page-tokens=64 \
  --inject-fault=attention-drop-tile -o "$OUT/tiny-wide128.p512-pg64-broken.sm_90.kiln"
kiln_log "tiny-wide128 with an FP8 KV cache (calibrated scales), paged: reference, artifacts"
"$BIN/kiln-ckpt" synth "$OUT/tiny-wide128.json" --format bf16 --seed 7 -o "$SMALL_CKPT" >/dev/null
FP8_PROMPT=$(python3 -c "print(','.join(str((37 * i + 11) % 1000 + 1) for i in range(1200)))")
"$BIN/kiln-interp" --weights "$SMALL_CKPT" --prompt-ids "$FP8_PROMPT" --linear-inputs=bf16 \
  --calibrate-kv-scales "$OUT/tiny-wide128.kv-scales.json" >/dev/null
"$BIN/kiln-interp" --weights "$SMALL_CKPT" --prompt-ids "$FP8_PROMPT" --max-new-tokens 8 \
  --linear-inputs=bf16 --attention-inputs=bf16 --kv-dtype=fp8 \
  --kv-scales "$OUT/tiny-wide128.kv-scales.json" --save-reference "$OUT/tiny-wide128.fp8tc-1200s.reference"
rm -rf "${SMALL_CKPT:?}"/*
FP8_FLAGS=(--target=sm_90 --max-prefill-tokens=512 --decode-batch=4 --verify-tokens=4
  --kv-page-tokens=64 --kv-dtype=fp8 --kv-scales "$OUT/tiny-wide128.kv-scales.json")
"$BIN/kilnc" "$OUT/tiny-wide128.json" "${FP8_FLAGS[@]}" -o "$OUT/tiny-wide128.p512-pg64-fp8.sm_90.kiln"
"$BIN/kilnc" "$OUT/tiny-wide128.json" "${FP8_FLAGS[@]}" --inject-fault=attention-drop-tile \
  -o "$OUT/tiny-wide128.p512-pg64-fp8-broken.sm_90.kiln"
kiln_log "tiny bf16 without the graph fusions (separate norms, ropes, expert kernels)"
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --no-fuse --decode-batch=8 -o "$OUT/tiny-bf16.nofuse.sm_90.kiln"
kiln_log "tiny nvfp4 tp2ep2: sm_90 artifact for 2 ranks (the rank failure checks)"
"$BIN/kilnc" muse-spark-tiny --target=sm_90 --quant=nvfp4 --tp=2 --ep=2 \
  -o "$OUT/tiny-nvfp4.tp2ep2.sm_90.kiln"
kiln_log "the full-width 4-layer proxy for bench/h200-proxy.sh"
"$BIN/kilnc" "$KILN_ROOT/bench/configs/muse-spark-open-4-layers.json" --target=sm_90 --quant=nvfp4 \
  --max-prefill-tokens=4096 --decode-batch=8 -o "$OUT/proxy-4-layers.sm_90.kiln"
du -sh "$OUT"
