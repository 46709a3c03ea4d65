#!/bin/bash
# A rank that dies or stalls stops the job: kiln-run --nproc 2 runs a long
# generation, the script kills (or stops) rank 1 once both ranks are
# decoding, and rank 0 must exit with an error naming the collective it was
# waiting in, within a bound. Prints what rank 0 said. kiln-run must be on
# PATH. Used by test/targets/x86/ranks.test (CPU) and scripts/gpu-check.sh
# (two GPUs).
#
#   rank-failure.sh kill|stop ARTIFACT WEIGHTS OUTDIR
set -u
mode=$1 artifact=$2 weights=$3 out=$4
mkdir -p "$out"
export KILN_COMM_TIMEOUT=2
start=$(date +%s)
kiln-run "$artifact" --weights "$weights" --prompt-ids 1,2,3 --max-new-tokens 4000 \
  --threads 1 --nproc 2 > "$out/stdout" 2> "$out/stderr" &
launcher=$!
# Both ranks loaded (each prints its line), then a moment of decoding.
for _ in $(seq 1 3000); do # up to 60 s (GPU loads and NCCL set-up)
  [ "$(grep -c 'weights loaded' "$out/stderr")" = 2 ] && break
  sleep 0.02
done
sleep 0.2
pid=$(sed -n 's/^kiln-run: rank 1 of 2 is pid \([0-9]*\)$/\1/p' "$out/stderr")
[ -n "$pid" ] || { echo "no rank 1 pid"; cat "$out/stderr"; exit 1; }
if [ "$mode" = kill ]; then kill -KILL "$pid"; else kill -STOP "$pid"; fi
# The job must end by itself; after 60 s it is killed and reported.
for _ in $(seq 1 3000); do
  kill -0 $launcher 2>/dev/null || break
  sleep 0.02
done
if kill -0 $launcher 2>/dev/null; then
  echo "the job was still running 60 s after rank 1 was ${mode}ed: killing it"
  pkill -KILL -P $launcher; kill -KILL $launcher
fi
wait $launcher
status=$?
elapsed=$(( $(date +%s) - start ))
[ "$mode" = stop ] && kill -KILL "$pid" 2>/dev/null
echo "launcher exit status: $status"
# Bounded: the 2 s timeout (stop) or the liveness check (kill), plus the
# launcher's grace of timeout + 5 s for the stopped rank.
[ "$elapsed" -le 20 ] && echo "stopped within 20 s" || echo "took $elapsed s"
grep '^kiln-run: error: rank 0:' "$out/stderr"
grep 'did not stop\|was killed' "$out/stderr" | sed 's/pid [0-9]*/pid N/'
