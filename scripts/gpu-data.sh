#!/usr/bin/env bash
# Prepares what the GPU checks need, on a machine with the compiler (MLIR) but
# possibly no GPU: sm_90 artifacts of muse-spark-tiny (BF16, NVFP4) and
# muse-spark-small (NVFP4), the tiny checkpoints, and reference runs: the fp32
# interpreter's for tiny, the x86 runtime's for small (the interpreter is too
# slow for small; the x86 runtime is itself checked against the interpreter).
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
  "$BIN/kilnc" muse-spark-tiny --target=sm_90 --quant=$quant -o "$OUT/tiny-$format.sm_90.kiln"
done
kiln_log "small nvfp4: x86 reference on synthetic:3 ($STEPS steps), sm_90 artifact"
"$BIN/kilnc" muse-spark-small --target=x86 --quant=nvfp4 -o "$OUT/small-nvfp4.x86.kiln"
"$BIN/kiln-check" "$OUT/small-nvfp4.x86.kiln" --weights synthetic:3 --prompt-ids "$PROMPT" \
  --steps "$STEPS" --write "$OUT/small-nvfp4.reference"
rm "$OUT/small-nvfp4.x86.kiln"
"$BIN/kilnc" muse-spark-small --target=sm_90 --quant=nvfp4 -o "$OUT/small-nvfp4.sm_90.kiln"
du -sh "$OUT"
