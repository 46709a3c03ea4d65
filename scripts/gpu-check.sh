#!/usr/bin/env bash
# Runs the GPU checks on a machine with an NVIDIA GPU, from what
# scripts/gpu-data.sh prepared: each sm_90 artifact against its reference
# (kiln-check), then the tiny kernels under compute-sanitizer.
#   scripts/gpu-check.sh BIN_DIR DATA_DIR
set -uo pipefail
BIN=$1
DATA=$2
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no CUDA device here: skipped"
  exit 77 # ctest's SKIP_RETURN_CODE for the gpu-end-to-end test
fi
for file in tiny-bf16.sm_90.kiln tiny-nvfp4.sm_90.kiln small-nvfp4.sm_90.kiln small-nvfp4.reference \
  small-bf16.sm_90.kiln small-bf16.reference; do
  if [ ! -e "$DATA/$file" ]; then
    echo "gpu-check: $DATA/$file is missing: run scripts/gpu-data.sh $DATA on a machine with the compiler"
    exit 1
  fi
done
status=0
check() {
  echo "== $1"
  "$BIN/kiln-check" "$DATA/$1.sm_90.kiln" --weights "$2" --reference "$DATA/$1.reference" \
    "${@:3}" || status=1
}
check tiny-bf16 "$DATA/tiny-bf16"
check tiny-nvfp4 "$DATA/tiny-nvfp4"
check small-nvfp4 synthetic:3
check small-bf16 synthetic:3
if command -v compute-sanitizer >/dev/null; then
  for format in bf16 nvfp4; do
    echo "== compute-sanitizer, tiny $format"
    compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$BIN/kiln-run" "$DATA/tiny-$format.sm_90.kiln" --weights "$DATA/tiny-$format" \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12 --max-new-tokens 8 2>&1 | tail -3 || status=1
  done
fi
echo "gpu-check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
