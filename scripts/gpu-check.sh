#!/usr/bin/env bash
# Runs the GPU checks on a machine with an NVIDIA GPU, from what
# scripts/gpu-data.sh prepared: each sm_90 artifact against its reference
# (kiln-check), then the tiny kernels under compute-sanitizer, and where the
# machine has two GPUs the two-rank artifacts (NCCL) and rank failures.
#   scripts/gpu-check.sh BIN_DIR DATA_DIR
set -uo pipefail
BIN=$1
DATA=$2
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no CUDA device here: skipped"
  exit 77 # ctest's SKIP_RETURN_CODE for the gpu-end-to-end test
fi
for file in tiny-bf16.sm_90.kiln tiny-nvfp4.sm_90.kiln small-nvfp4.sm_90.kiln small-nvfp4.reference \
  small-bf16.sm_90.kiln small-bf16.reference small-bf16.tp2ep2.sm_90.kiln small-bf16.tp2ep2sp.sm_90.kiln \
  small-nvfp4.b64.sm_90.kiln small-nvfp4.b64.tp2ep2.sm_90.kiln tiny-nvfp4.tp2ep2.sm_90.kiln \
  small-nvfp4.p512.sm_90.kiln small-nvfp4.p512-broken.sm_90.kiln small-nvfp4.bf16tc.reference \
  small-nvfp4.p512-attn-broken.sm_90.kiln tiny-bf16.bf16tc-24.reference \
  tiny-bf16.bf16tc-100.reference tiny-bf16.bf16tc-600.reference \
  tiny-bf16.p512.sm_90.kiln tiny-bf16.nofuse.sm_90.kiln \
  small-nvfp4.bf16tc-600.reference small-nvfp4.p512-experts-broken.sm_90.kiln \
  tiny-nvfp4.p512.sm_90.kiln tiny-nvfp4.bf16tc-24.reference tiny-nvfp4.bf16tc-100.reference \
  tiny-nvfp4.bf16tc-600.reference tiny-wide.p500.sm_90.kiln tiny-wide.bf16tc-24.reference \
  tiny-wide.bf16tc-100.reference tiny-wide.bf16tc-600.reference tiny-wide128.p500.sm_90.kiln \
  tiny-wide128.p500-attn-broken.sm_90.kiln tiny-wide128.bf16tc-24.reference \
  tiny-wide128.bf16tc-100.reference tiny-wide128.bf16tc-600.reference \
  tiny-wide128.bf16tc-1200s.reference small-nvfp4.narrow-broken.sm_90.kiln small-nvfp4.b24.sm_90.kiln \
  tiny-bf16.f32kv.sm_90.kiln tiny-bf16.f32kv.reference tiny-wide128.p500-pg16-b4.sm_90.kiln \
  tiny-wide128.p512-pg64-b4.sm_90.kiln tiny-wide128.p512-pg64-broken.sm_90.kiln \
  tiny-wide128.p512-pg64-fp8.sm_90.kiln tiny-wide128.p512-pg64-fp8-broken.sm_90.kiln \
  tiny-wide128.fp8tc-1200s.reference small-nvfp4.staged-broken.sm_90.kiln \
  small-nvfp4.pair-broken.sm_90.kiln small-nvfp4.p512-combine-broken.sm_90.kiln \
  tiny-bf16.p2048.sm_90.kiln tiny-nvfp4.p2048.sm_90.kiln tiny-bf16.bf16tc-2000.reference \
  tiny-nvfp4.bf16tc-2000.reference tiny-bf16.p2048-experts-broken.sm_90.kiln \
  tiny-pairs128.p500.sm_90.kiln tiny-pairs128.p500-attn-broken.sm_90.kiln \
  tiny-pairs128.bf16tc-24.reference tiny-pairs128.bf16tc-100.reference \
  tiny-pairs128.bf16tc-600.reference \
  tiny-pairs128.bf16tc-1200s.reference; do
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
work=$(mktemp -d)
# synthetic:SEED made on the GPU by the artifact's synthesis kernels (the
# default there) against the host generator: the same bytes, hence the same
# logits and tokens bit for bit.
synthesis() { # name, then kiln-check's extra arguments
  local name=$1
  shift
  echo "== $name: synthetic weights on the device against the host generator"
  for where in host device; do
    "$BIN/kiln-check" "$DATA/$name.sm_90.kiln" --weights synthetic:3 --prompt-ids "$(seq -s, 1 12)" \
      --steps 8 --synthesize $where --write "$work/$name.$where" "$@" >/dev/null || status=1
  done
  cmp "$work/$name.host" "$work/$name.device" && echo "identical" || status=1
}
check tiny-bf16 "$DATA/tiny-bf16"
check tiny-nvfp4 "$DATA/tiny-nvfp4"
# An f32 KV cache (the split warp kernels): batched decode within 5e-5 of
# each conversation alone, as before the bf16 cache.
check tiny-bf16.f32kv "$DATA/tiny-bf16"
# Without the graph fusions: the single ops' kernels (head_norm, rope, the
# unfused expert stage) against the same reference.
echo "== tiny-bf16 without the fusions"
"$BIN/kiln-check" "$DATA/tiny-bf16.nofuse.sm_90.kiln" --weights "$DATA/tiny-bf16" \
  --reference "$DATA/tiny-bf16.reference" || status=1
check small-nvfp4 synthetic:3
check small-bf16 synthetic:3
# 64 conversations: the batched check steps them together (the narrow expert
# kernels, tensor-core tiles for the linears and head) against each alone.
echo "== small-nvfp4, 64 conversations"
"$BIN/kiln-check" "$DATA/small-nvfp4.b64.sm_90.kiln" --weights synthetic:3 \
  --reference "$DATA/small-nvfp4.reference" || status=1
# 24 conversations: the narrow tensor-core linears and head with three groups
# of 8 tokens a warp.
echo "== small-nvfp4, 24 conversations"
"$BIN/kiln-check" "$DATA/small-nvfp4.b24.sm_90.kiln" --weights synthetic:3 \
  --reference "$DATA/small-nvfp4.reference" || status=1
synthesis small-nvfp4
synthesis small-bf16
# Hopper's prefill entries (chunks of 512) compute on tensor cores with bf16
# inputs: the wgmma GEMMs read the activations as bf16, and attention (the
# mma.sync flash kernel) reads q, k, v and its softmax numerators as bf16.
# Their prefill logits are checked against the interpreter with the same
# roundings (kiln-interp --linear-inputs=bf16 --attention-inputs=bf16).
# Tiny (window 8, head_dim 32) for prompts of 24, 100 and 600 tokens (several
# query and key tiles; 600 is two chunks, the second reading the first's keys
# from the cache ring) to 3e-2 of the largest logit (relative RMS 1.5e-2).
# Small (64 experts, top 8) for 24 and 600 tokens to 0.2 (relative RMS 0.1):
# there bf16 rounding anywhere flips the routing of some token now and then,
# which moves the last logits by up to 8% whichever side rounds (measured on an
# H200: the CUDA-core f32 attention 8.4e-2 relative RMS on a 300-token prompt
# where the tensor-core kernel gives 7.9e-3; the tensor-core kernel 5.0e-2 on
# the 24-token prompt against the rounded reference, 1.2e-2 against the
# unrounded one). Kernels broken on purpose give 0.44 to 0.61 and must fail:
# a wgmma GEMM with its last k step dropped, and attention with each block's
# last key tile dropped.
for format in bf16 nvfp4; do
  for n in 24 100 600; do
    echo "== tiny-$format, tensor-core prefill of $n tokens, against the interpreter with the same roundings"
    "$BIN/kiln-check" "$DATA/tiny-$format.p512.sm_90.kiln" --weights "$DATA/tiny-$format" \
      --reference "$DATA/tiny-$format.bf16tc-$n.reference" --tolerance 0.03 --batch-steps 0 ||
      status=1
  done
done
# One chunk of 2000 tokens: every expert past one 256-item tile of the
# Hopper expert GEMMs.
for format in bf16 nvfp4; do
  echo "== tiny-$format, one prefill chunk of 2000 tokens, against the interpreter with the same roundings"
  "$BIN/kiln-check" "$DATA/tiny-$format.p2048.sm_90.kiln" --weights "$DATA/tiny-$format" \
    --context 4096 --reference "$DATA/tiny-$format.bf16tc-2000.reference" --tolerance 0.03 \
    --batch-steps 0 || status=1
done
# The wgmma attention with a head's 128 queries a block (tiny-wide's groups
# of three) or 64 queries of two heads a block (tiny-pairs128: each key tile
# serves both, as in small and the proxy), a window of 128 (two 64-key tiles
# at head_dim 64, one 128-key tile at 128; tiny-pairs128's window two 128-key
# tiles) and a second chunk over the cache (its tiles by TMA from the cache,
# wrapped around the ring, below position 0).
for name in tiny-wide tiny-wide128 tiny-pairs128; do
  for n in 24 100 600; do
    echo "== $name, wgmma attention in prefill of $n tokens, against the interpreter with the same roundings"
    "$BIN/kiln-check" "$DATA/$name.p500.sm_90.kiln" --weights synthetic:7 \
      --reference "$DATA/$name.bf16tc-$n.reference" --tolerance 0.03 --batch-steps 0 ||
      status=1
  done
done
# Decode past a 1200-token prompt, each step's logits held to the
# interpreter's with the same roundings (the split decode attention and its
# merge, which greedy choices alone would not catch).
for name in tiny-wide128 tiny-pairs128; do
  echo "== $name, 8 decode steps after 1200 tokens, their logits against the interpreter"
  "$BIN/kiln-check" "$DATA/$name.p500.sm_90.kiln" --weights synthetic:7 --context 2048 \
    --reference "$DATA/$name.bf16tc-1200s.reference" --tolerance 0.03 --step-tolerance 0.03 \
    --batch-steps 0 || status=1
done
# Paged caches: pages of 16 with chunks of 500 (cached tiles straddle pages,
# converted through the table), pages of 64 with chunks of 512 (each cached
# tile one page, by TMA); batched, verify and speculative steps too; a
# dropped tile must fail (memcheck and racecheck below).
for paged in p500-pg16-b4 p512-pg64-b4; do
  echo "== tiny-wide128 $paged (paged KV), 1200 tokens and 8 steps against the interpreter"
  "$BIN/kiln-check" "$DATA/tiny-wide128.$paged.sm_90.kiln" --weights synthetic:7 --context 2048 \
    --reference "$DATA/tiny-wide128.bf16tc-1200s.reference" --tolerance 0.03 \
    --step-tolerance 0.03 || status=1
done
echo "== tiny-wide128 paged with a tile dropped on purpose: must fail"
if "$BIN/kiln-check" "$DATA/tiny-wide128.p512-pg64-broken.sm_90.kiln" --weights synthetic:7 \
  --context 2048 --reference "$DATA/tiny-wide128.bf16tc-1200s.reference" --tolerance 0.03 \
  --batch-steps 0 > /dev/null; then
  echo "gpu-check: the broken paged kernel passed"
  status=1
fi
# An FP8 cache (calibrated scales), paged: against the interpreter with the
# same cache and scales, at the FP8 tolerance (kiln-check's batched bounds
# widen for it; test/targets/x86/kv-fp8.test says why); a dropped tile fails.
echo "== tiny-wide128 p512-pg64-fp8 (FP8 KV), 1200 tokens and 8 steps against the interpreter"
"$BIN/kiln-check" "$DATA/tiny-wide128.p512-pg64-fp8.sm_90.kiln" --weights synthetic:7 --context 2048 \
  --reference "$DATA/tiny-wide128.fp8tc-1200s.reference" --tolerance 0.05 \
  --step-tolerance 0.05 || status=1
echo "== tiny-wide128 FP8 with a tile dropped on purpose: must fail"
if "$BIN/kiln-check" "$DATA/tiny-wide128.p512-pg64-fp8-broken.sm_90.kiln" --weights synthetic:7 \
  --context 2048 --reference "$DATA/tiny-wide128.fp8tc-1200s.reference" --tolerance 0.05 \
  --batch-steps 0 --verify-steps 0 > /dev/null; then
  echo "gpu-check: the broken FP8 kernel passed"
  status=1
fi
for prompt in "" "-600"; do
  echo "== small-nvfp4, tensor-core prefill, against the interpreter with the same roundings$prompt"
  "$BIN/kiln-check" "$DATA/small-nvfp4.p512.sm_90.kiln" --weights synthetic:3 \
    --reference "$DATA/small-nvfp4.bf16tc$prompt.reference" --tolerance 0.2 --batch-steps 0 ||
    status=1
done
must_fail() { # what, then kiln-check's arguments
  echo "== $1: must fail"
  if "$BIN/kiln-check" "${@:2}"; then
    echo "(the broken kernel passed the check)"
    status=1
  else
    echo "(failed, as it must)"
  fi
}
broken() { # artifact, reference, what[, weights, tolerance]
  must_fail "${1%%.*}, $3" "$DATA/$1.sm_90.kiln" --weights "${4:-synthetic:3}" \
    --reference "$DATA/$2.reference" --tolerance "${5:-0.2}" --batch-steps 0
}
broken small-nvfp4.p512-broken small-nvfp4.bf16tc "a wgmma GEMM broken on purpose (its last k step dropped)"
broken small-nvfp4.p512-attn-broken small-nvfp4.bf16tc-600 \
  "attention broken on purpose (each block's last key tile dropped)"
broken small-nvfp4.p512-experts-broken small-nvfp4.bf16tc-600 \
  "the experts' gate/up GEMM broken on purpose (its last k step dropped)"
broken small-nvfp4.p512-combine-broken small-nvfp4.bf16tc-600 \
  "the experts' combine broken on purpose (each token's last choice left out)"
broken tiny-wide128.p500-attn-broken tiny-wide128.bf16tc-600 \
  "attention broken on purpose (each block's last key tile dropped)" synthetic:7 0.03
broken tiny-pairs128.p500-attn-broken tiny-pairs128.bf16tc-600 \
  "attention broken on purpose (each block's last key tile dropped)" synthetic:7 0.03
broken tiny-bf16.p2048-experts-broken tiny-bf16.bf16tc-2000 \
  "the experts' gate/up GEMM broken on purpose (its last k step dropped), two tiles an expert" \
  "$DATA/tiny-bf16" 0.03
# The narrow expert kernels (a few items an expert: small's 64-token prefill
# and its batched decode) with gate/up's last k step dropped, against the f32
# reference with the default tolerance.
must_fail "small-nvfp4, the narrow expert gate/up broken on purpose (its last k step dropped)" \
  "$DATA/small-nvfp4.narrow-broken.sm_90.kiln" --weights synthetic:3 \
  --reference "$DATA/small-nvfp4.reference"
# The batch-1 decode's staged expert kernels (small's widths are whole
# 1024-element chunks; the small-nvfp4 check above runs them), gate/up left
# one chunk short, against the same reference and tolerances: must fail.
must_fail "small-nvfp4, the staged expert gate/up broken on purpose (a chunk left out)" \
  "$DATA/small-nvfp4.staged-broken.sm_90.kiln" --weights synthetic:3 \
  --reference "$DATA/small-nvfp4.reference"
# The decode step's k and v projections in one launch (the pair GEMV, which
# the small-nvfp4 check above runs), its second product reading the first's
# weights: must fail.
must_fail "small-nvfp4, the k/v pair GEMV broken on purpose (v from k's weights)" \
  "$DATA/small-nvfp4.pair-broken.sm_90.kiln" --weights synthetic:3 \
  --reference "$DATA/small-nvfp4.reference"
if command -v compute-sanitizer >/dev/null; then
  # The staged expert kernels' shared-memory copy and barrier.
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool, small nvfp4's staged expert kernels"
    compute-sanitizer --tool $tool --error-exitcode 3 --kernel-name kns=staged \
      "$BIN/kiln-run" "$DATA/small-nvfp4.sm_90.kiln" --weights synthetic:3 \
      --prompt-ids 1,2,3,4,5,6,7,8 --max-new-tokens 3 2>&1 | tail -1 || status=1
  done
  for format in bf16 nvfp4; do
    echo "== compute-sanitizer, tiny $format"
    compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$BIN/kiln-run" "$DATA/tiny-$format.sm_90.kiln" --weights "$DATA/tiny-$format" \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12 --max-new-tokens 8 2>&1 | tail -3 || status=1
    # The batched entry (8 conversations: the narrow expert kernels).
    echo "== compute-sanitizer, tiny $format, 8 conversations stepped together"
    compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$BIN/kiln-check" "$DATA/tiny-$format.sm_90.kiln" --weights "$DATA/tiny-$format" \
      --reference "$DATA/tiny-$format.reference" --batch-steps 4 2>&1 | tail -3 || status=1
  done
  # The wgmma pipeline (TMA, mbarriers, shared memory read by the tensor
  # cores): memory errors over small's several row tiles; races over tiny's
  # (racecheck does not finish small's artifact within minutes).
  sanitize() { # tool, artifact, weights[, prompt tokens (300)]
    local tokens=${4:-300}
    # Ids 1, 2, ... 1000, 1, 2, ...: within tiny's vocabulary of 1024.
    local ids
    ids=$(seq 1 "$tokens" | awk '{printf "%s%d", (NR > 1 ? "," : ""), ($1 - 1) % 1000 + 1}')
    echo "== compute-sanitizer $1, $2, a $tokens-token prompt"
    if ! compute-sanitizer --tool "$1" --error-exitcode 3 "$BIN/kiln-run" "$DATA/$2.sm_90.kiln" \
      --weights "$3" --prompt-ids "$ids" --max-new-tokens 2 > "$work/sanitizer.log" 2>&1; then
      grep -v '^[0-9,]*$' "$work/sanitizer.log" | head -40
      status=1
    fi
    tail -3 "$work/sanitizer.log"
  }
  sanitize memcheck small-nvfp4.p512 synthetic:3
  sanitize memcheck tiny-bf16.nofuse "$DATA/tiny-bf16"
  sanitize racecheck tiny-bf16.p512 "$DATA/tiny-bf16"
  sanitize memcheck tiny-wide128.p512-pg64-b4 synthetic:7 1100
  sanitize racecheck tiny-wide128.p512-pg64-b4 synthetic:7 1100
  sanitize memcheck tiny-wide128.p512-pg64-fp8 synthetic:7 1100
  sanitize racecheck tiny-wide128.p512-pg64-fp8 synthetic:7 1100
  sanitize racecheck tiny-nvfp4.p512 "$DATA/tiny-nvfp4"
  # Two 256-item tiles an expert, every 64-row block live.
  sanitize memcheck tiny-nvfp4.p2048 "$DATA/tiny-nvfp4" 2000
  sanitize racecheck tiny-nvfp4.p2048 "$DATA/tiny-nvfp4" 2000
  # The wgmma attention over two chunks (the second's tiles reach into the
  # cache: by TMA and converted).
  for name in tiny-wide tiny-wide128 tiny-pairs128; do
    sanitize memcheck $name.p500 synthetic:7 600
    sanitize racecheck $name.p500 synthetic:7 600
  done
fi

# kiln-serve on small NVFP4's 24 conversation slots, driven as a client would
# (test/runtime/serve/Inputs/serve_check.py: concurrent requests give exactly
# kiln-run's tokens, streaming, chat, 429, ...), where the tools are built.
if [ -x "$BIN/kiln-serve" ] && [ -x "$BIN/kiln-tokenize" ] && command -v python3 >/dev/null; then
  echo "== kiln-serve, small nvfp4, 24 slots"
  root=$(cd "$(dirname "$0")/.." && pwd)
  python3 "$root/test/runtime/text/Inputs/make_tokenizer.py" "$work/tok" --vocab-size 32000 \
    --chat-template "$root/test/runtime/text/Inputs/chat_headers.jinja" &&
    PATH="$BIN:$PATH" python3 "$root/test/runtime/serve/Inputs/serve_check.py" \
      "$DATA/small-nvfp4.b24.sm_90.kiln" "$work/tok" --gpu || status=1
else
  echo "gpu-check: kiln-serve or kiln-tokenize not in $BIN: the server check is skipped"
fi
# Two GPUs: each layout's one artifact, as two processes (kiln-check --nproc
# 2), against the interpreter and against the one-GPU artifact's own run;
# then a rank killed and a rank stopped mid-decode must stop the job.
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  export KILN_NCCL_LIBRARY=${KILN_NCCL_LIBRARY:-$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' 2>/dev/null)}
  synthesis small-nvfp4.tp2ep2 --nproc 2
  for format in bf16 nvfp4; do
    "$BIN/kiln-check" "$DATA/small-$format.sm_90.kiln" --weights synthetic:3 \
      --prompt-ids "$(seq -s, 1 24)" --steps 32 --write "$work/small-$format.one-gpu" >/dev/null || status=1
    for layout in tp2 ep2 tp2ep2 tp2sp tp2ep2sp; do
      echo "== small $format $layout, 2 GPUs, against the interpreter"
      "$BIN/kiln-check" "$DATA/small-$format.$layout.sm_90.kiln" --weights synthetic:3 \
        --reference "$DATA/small-$format.reference" --nproc 2 2>"$work/err" || { status=1; cat "$work/err"; }
      echo "== small $format $layout, 2 GPUs, against 1 GPU"
      "$BIN/kiln-check" "$DATA/small-$format.$layout.sm_90.kiln" --weights synthetic:3 \
        --reference "$work/small-$format.one-gpu" --tolerance 2e-3 --max-near-ties 0 --batch-steps 0 \
        --nproc 2 2>"$work/err" || { status=1; cat "$work/err"; }
    done
  done
  if command -v compute-sanitizer >/dev/null; then
    # The persistent MegaMoE kernel, storing into the other rank's memory. NCCL
    # probes for kernel images it lacks through failing API calls, which are
    # not memory errors: those are not reported.
    echo "== compute-sanitizer, tiny nvfp4 tp2ep2, 2 GPUs"
    compute-sanitizer --tool memcheck --target-processes all --report-api-errors no --error-exitcode 3 \
      "$BIN/kiln-run" "$DATA/tiny-nvfp4.tp2ep2.sm_90.kiln" --weights "$DATA/tiny-nvfp4" \
      --prompt-ids 1,2,3,4,5,6,7,8,9,10,11,12 --max-new-tokens 8 --nproc 2 2>&1 | tail -4 || status=1
  fi
  echo "== small nvfp4 tp2ep2, 64 conversations, 2 GPUs, against the interpreter"
  "$BIN/kiln-check" "$DATA/small-nvfp4.b64.tp2ep2.sm_90.kiln" --weights synthetic:3 \
    --reference "$DATA/small-nvfp4.reference" --nproc 2 2>"$work/err" || { status=1; cat "$work/err"; }
  for mode in kill stop; do
    echo "== tiny nvfp4 tp2ep2, 2 GPUs: rank 1 ${mode}ed mid-decode"
    PATH="$BIN:$PATH" "$(dirname "$0")/rank-failure.sh" $mode "$DATA/tiny-nvfp4.tp2ep2.sm_90.kiln" \
      "$DATA/tiny-nvfp4" "$work/$mode" | tee "$work/$mode.out"
    grep -q "launcher exit status: 1" "$work/$mode.out" && grep -q "stopped within 20 s" "$work/$mode.out" &&
      grep -q "error: rank 0: .* for '" "$work/$mode.out" || { status=1; echo "(not as expected)"; }
  done
else
  echo "gpu-check: one GPU: the two-GPU checks are skipped"
fi
rm -rf "$work"
echo "gpu-check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
