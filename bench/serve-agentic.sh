#!/usr/bin/env bash
# The agentic replay of issue 22 (kiln-bench-serve: sessions sharing a system
# prompt, prompts growing turn by turn with replies and tool outputs) against
# kiln-serve on ARTIFACT, with prefix reuse and without it (--no-prefix-reuse),
# at each concurrency; beside them, the memory roofline of the artifact's
# decode steps measured in the same run (kiln-bench-decode: a GPU's HBM, or
# the host's memory for x86 artifacts) at the workload's middle context.
#   bench/serve-agentic.sh ARTIFACT WEIGHTS [kiln-bench-serve options]
# Tools from $KILN_BIN (default: PATH); $KILN_SERVE_FLAGS adds kiln-serve flags
# (--threads N, --device N, --context N, ...). Examples:
#   CPU, tiny:  kilnc muse-spark-tiny --target=x86 --decode-batch=8 -o tiny.kiln
#               bench/serve-agentic.sh tiny.kiln synthetic:1
#   H200, the proxy (bench/configs, kilnc --target=sm_90 --quant=nvfp4
#   --decode-batch=64): KILN_SERVE_FLAGS="--context 32768" bench/serve-agentic.sh
#               proxy.kiln synthetic:1 --system-tokens 2048 --tool-tokens 2048
set -euo pipefail
if [ $# -lt 2 ]; then
  sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
ARTIFACT=$1
WEIGHTS=$2
shift 2
tool() { if [ -n "${KILN_BIN:-}" ]; then echo "$KILN_BIN/$1"; else echo "$1"; fi; }
work=$(mktemp -d)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

servers=0
serve() { # kiln-serve flags...
  # Each server logs to files of its own: the background shell creates them
  # only once it runs, so a shared name could still show the last server's
  # "listening on" line (and its port) to the loop below.
  servers=$((servers + 1))
  log=$work/serve.$servers
  # shellcheck disable=SC2086
  "$(tool kiln-serve)" "$ARTIFACT" --weights "$WEIGHTS" --port 0 --max-waiting 4096 --http-threads 160 \
    ${KILN_SERVE_FLAGS:-} "$@" > "$log.out" 2> "$log.err" &
  pid=$!
  for _ in $(seq 1200); do
    grep -qs "listening on" "$log.err" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log.err" >&2
      echo "serve-agentic: kiln-serve did not start" >&2
      exit 1
    fi
    sleep 0.1
  done
  url=$(sed -n "s/.*listening on \(http:[^ ]*\).*/\1/p" "$log.err")
  [ -n "$url" ] || { echo "serve-agentic: kiln-serve did not say where it listens" >&2; exit 1; }
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || { cat "$log.err" >&2; echo "serve-agentic: kiln-serve failed" >&2; exit 1; }
  pid=
}

serve
"$(tool kiln-bench-serve)" "$url" --label "prefix reuse" "$@"
stop
serve --no-prefix-reuse
"$(tool kiln-bench-serve)" "$url" --label "prefix reuse off" "$@"
stop

# The decode steps' roofline at the replay's middle context (its defaults or
# the given sizes: system + first + half the turns' growth).
context=$("$(tool kiln-bench-serve)" "$url" --print-middle-context "$@")
if ! "$(tool kiln-bench-decode)" "$ARTIFACT" --weights "$WEIGHTS" --context "$context" --steps 8 \
  > "$work/decode.out" 2> "$work/decode.err"; then
  cat "$work/decode.err" >&2
  echo "serve-agentic: kiln-bench-decode failed" >&2
  exit 1
fi
grep -E "^(yardstick|decode|roofline)" "$work/decode.out"
