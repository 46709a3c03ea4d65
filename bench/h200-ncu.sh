#!/usr/bin/env bash
# Nsight Compute figures for the kernels that take the most time in one
# prefill call and the decode steps of an artifact (issue 21, item 6):
#
#   bench/h200-ncu.sh BIN ARTIFACT [PREFILL_TOKENS] [DECODE_STEPS]
#
# TOP=N lists the N kernels that take the most time in each phase (10).
# Runs kiln-run under ncu twice (clocks left alone, --clock-control none): a
# prompt of PREFILL_TOKENS (default 4096) with one reply token (the prefill's
# launches), then with DECODE_STEPS (default 8) more, every launch of Kiln's
# kernels profiled (a CUDA graph's kernels as its nodes). Then for each phase
# the kernels summed by name, the most time first: time, launches, tensor
# pipe busy (wgmma and mma.sync alike), DRAM throughput and achieved
# occupancy, each as a percent of its peak, averaged over the kernel's
# launches weighted by their time. ncu must reach the counters (Firecracker
# machines do; gVisor ones do not: docs/gpu-notes.md).
set -euo pipefail
BIN=$1
ARTIFACT=$2
PREFILL=${3:-4096}
STEPS=${4:-8}
NCU=${NCU:-ncu}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The metrics this chip and ncu know, of those wanted.
wanted="gpu__time_duration.sum sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active
dram__throughput.avg.pct_of_peak_sustained_elapsed sm__warps_active.avg.pct_of_peak_sustained_active"
known=$("$NCU" --query-metrics --csv 2>/dev/null | cut -d, -f1 | tr -d '"' || true)
metrics=""
for m in $wanted; do
  base=${m%%.*}
  if grep -qx "$base" <<<"$known"; then metrics="$metrics${metrics:+,}$m"; fi
done
echo "h200-ncu: metrics $metrics"

ids=$(python3 -c "print(','.join(str((37 * i + 11) % 30000 + 1) for i in range($PREFILL)))")
# Kiln's compiled kernels, not the synthetic weights' (kiln_synth_*).
profile() {
  "$NCU" --clock-control none --metrics "$metrics" --csv --page raw --print-units base \
    --kernel-name-base function --kernel-name 'regex:^kiln_([^s]|s[^y])' \
    "$BIN/kiln-run" "$ARTIFACT" --weights synthetic:1 --prompt-ids "$ids" \
    --max-new-tokens "$2" --context $((PREFILL + STEPS + 16)) >"$work/$1.csv" 2>"$work/$1.err" || {
    cat "$work/$1.err" >&2
    tail -20 "$work/$1.csv" >&2
    exit 1
  }
}
# One reply token comes from the prefill's logits: that run's launches are
# the prefill's; the longer run's launches after as many are the decode steps'.
profile prefill 1
profile decode $((STEPS + 1))
python3 - "$work/prefill.csv" "$work/decode.csv" "${TOP:-10}" <<'PY'
import csv, io, sys


def launches(path):
    text = open(path).read()
    # ncu prints the program's own output first; the CSV starts at its header.
    rows = list(csv.DictReader(io.StringIO(text[text.index('"ID"'):])))
    return [r for r in rows if r.get("ID", "").isdigit()]


def num(r, k):
    try:
        return float(r.get(k, "").replace(",", ""))
    except ValueError:
        return None


prefill = launches(sys.argv[1])
both = launches(sys.argv[2])
phases = {"prefill": prefill, "decode": both[len(prefill):]}
time_key = "gpu__time_duration.sum"
label = {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe busy",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput",
         "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy"}
pct_keys = [k for k in label if k in both[0]]
for phase, rs in phases.items():
    if not rs:
        continue
    total = sum(num(r, time_key) or 0 for r in rs)
    byname = {}
    for r in rs:
        byname.setdefault(r["Kernel Name"], []).append(r)
    print(f"\n{phase}: {len(rs)} launches, {total / 1e6:.3f} ms in all (ncu's kernel durations)")
    print("| kernel | time | share | launches | " + " | ".join(label[k] for k in pct_keys) + " |")
    print("| --- " * (4 + len(pct_keys)) + "|")
    ranked = sorted(byname.items(), key=lambda kv: -sum(num(r, time_key) or 0 for r in kv[1]))
    for name, group in ranked[:int(sys.argv[3])]:
        t = sum(num(r, time_key) or 0 for r in group)
        cells = []
        for k in pct_keys:
            pairs = [(num(r, k), num(r, time_key) or 0) for r in group if num(r, k) is not None]
            w = sum(d for _, d in pairs)
            cells.append(f"{sum(v * d for v, d in pairs) / w:.1f}%" if w else "-")
        print(f"| `{name[:72]}` | {t / 1e3:.1f} us | {100 * t / total:.1f}% | {len(group)} | " +
              " | ".join(cells) + " |")
PY
