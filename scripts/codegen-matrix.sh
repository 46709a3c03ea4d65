#!/usr/bin/env bash
# kilnc's generated code for a matrix of models, targets and options, one file
# per output (--emit=plan and --emit=library) and a SUMS file of their
# SHA-256s. A refactor proves itself by the same SUMS before and after:
#   scripts/codegen-matrix.sh OLD_KILNC /tmp/before
#   scripts/codegen-matrix.sh build/bin/kilnc /tmp/after
#   diff /tmp/before/SUMS /tmp/after/SUMS
# x86 is compiled for named CPUs (host would differ between machines).
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 KILNC OUTDIR" >&2
  exit 2
fi
kilnc=$1
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
proxy=$root/bench/configs/muse-spark-open-4-layers.json
mkdir -p "$out"
rm -f "$out"/*.plan "$out"/*.library "$out/SUMS"

# name | model | flags
cases=(
  "tiny-bf16|muse-spark-tiny|"
  "tiny-nvfp4|muse-spark-tiny|--quant=nvfp4"
  "tiny-nvfp4-b8-v8|muse-spark-tiny|--quant=nvfp4 --decode-batch=8 --verify-tokens=8"
  "tiny-bf16-b4-p64|muse-spark-tiny|--decode-batch=4 --max-prefill-tokens=64"
  "tiny-bf16-unfused|muse-spark-tiny|--no-fuse"
  "tiny-bf16-kvf32|muse-spark-tiny|--kv-dtype=f32"
  "tiny-tp2ep2|muse-spark-tiny|--tp=2 --ep=2"
  "tiny-tp2sp|muse-spark-tiny|--tp=2 --sp --max-prefill-tokens=64"
  "small-nvfp4-p512-b8|muse-spark-small|--quant=nvfp4 --max-prefill-tokens=512 --decode-batch=8"
  "small-bf16-b64|muse-spark-small|--decode-batch=64"
  "proxy-nvfp4|$proxy|--quant=nvfp4 --max-prefill-tokens=4096 --decode-batch=8"
)
targets=("sm_90" "sm_100" "gfx950" "x86 --cpu=znver4" "x86 --cpu=sapphirerapids" "x86 --cpu=x86-64-v3")

count=0
for c in "${cases[@]}"; do
  IFS='|' read -r name model flags <<<"$c"
  for t in "${targets[@]}"; do
    target=${t%% *}
    extra=""
    [ "$t" != "$target" ] && extra=${t#* }
    tag=$target${extra:+-${extra#--cpu=}}
    # The full-width proxy on x86 takes minutes a library: GPU targets only.
    if [[ $name == proxy* && $target == x86 ]]; then continue; fi
    for emit in plan library; do
      file=$out/$name.$tag.$emit
      # shellcheck disable=SC2086
      "$kilnc" "$model" --target="$target" $extra $flags --emit=$emit -o "$file" 2>"$file.err" ||
        { echo "FAILED: $name $tag $emit: $(head -c 300 "$file.err")" >&2; exit 1; }
      rm -f "$file.err"
      count=$((count + 1))
    done
  done
done
(cd "$out" && sha256sum ./*.plan ./*.library | sort -k2) >"$out/SUMS"
echo "$count outputs in $out (SUMS)"
