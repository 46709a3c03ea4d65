#!/usr/bin/env bash
# The main job: build Kiln; compile Muse Spark Open 816B-A42B for 8 H200s
# (TP8/EP8/SP, NVFP4 experts) to graph IR and print its report and memory plan; then compile muse-spark-tiny
# for this CPU (kilnc --cpu=host: AMX, AVX-512 BF16 or AVX2 kernels, as it has) and run it on seeded
# synthetic weights.
source "$(dirname "$0")/lib.sh"

CONFIG=${1:-muse-spark-open-816b-a42b}
RUN_CONFIG=${2:-muse-spark-tiny}
kiln_install_packages
kiln_configure "$KILN_BUILD"
kiln_build "$KILN_BUILD" kilnc kiln-run kiln-dump

kiln_log "compiling $CONFIG (TP8/EP8/SP, NVFP4 experts, 8192-token prefill) to graph IR: $KILN_BUILD/$CONFIG.graph.mlir"
"$KILN_BUILD/bin/kilnc" "$CONFIG" --tp 8 --ep 8 --sp --quant=nvfp4 --tokens 8192 --report \
  -o "$KILN_BUILD/$CONFIG.graph.mlir"

ARTIFACT="$KILN_BUILD/$RUN_CONFIG.x86.kiln"
kiln_log "compiling $RUN_CONFIG for this CPU (--cpu=host): $ARTIFACT"
"$KILN_BUILD/bin/kilnc" "$RUN_CONFIG" --target=x86 --cpu=host -o "$ARTIFACT"
"$KILN_BUILD/bin/kiln-dump" "$ARTIFACT" | sed -n 1,8p # sed reads it all: no SIGPIPE
kiln_log "running $RUN_CONFIG: 32 tokens from a 24-token prompt, synthetic weights (seed 1)"
"$KILN_BUILD/bin/kiln-run" "$ARTIFACT" --weights synthetic:1 \
  --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24 --max-new-tokens 32
