#!/usr/bin/env bash
# The one GPU run (docs/gpu.md, "The GPU check"): every GPU test and
# measurement weft has, each stage under its own timeout, logs written as it
# goes into one folder and packed into one file, and a summary table.
#
#   scripts/gpu_check.sh [--dry-run] [--out DIR] [--only STAGE,...] [--budget-s S]
#
# Stages (name: timeout):
#   env 60       driver, GPU, glibc, the CUDA libraries found, torch; unpacks
#                build/gpu-bundle when the carried build has no libraries;
#                rebuilds the cuda backend with the machine's nvcc (make cuda)
#                when the carried one does not open
#   ceilings 90  device copy GB/s and torch.matmul bf16 8192^3 TFLOP/s; weft's
#                own matmul rate (ops-check --perf)
#   ops 90       weft ops-check on the device against ref (every op), its
#                --perf rates, compute-sanitizer memcheck on small ops
#   model 90     weft on the device: the same losses twice (bitwise), stop and
#                resume equal to the uninterrupted run; the model against
#                PyTorch (tests/py/test_model_vs_torch.py where pytest runs)
#   throughput 120  gpt2-small at T = 1024 (tokens/s, MFU, peak memory) beside
#                PyTorch eager (bf16 autocast, SDPA, fused AdamW), then
#                torch.compile if the budget has time left
#   trace 45     one traced step and `weft trace analyze`
#
# --dry-run runs every stage here, on the cpu backend at tiny sizes, so that
# the script cannot rot between GPU runs (tests/py/test_gpu_check.py); what
# needs a GPU (nvidia-smi, compute-sanitizer, CUDA timings) says "skipped".
# Output: DIR/summary.txt, DIR/logs/NN-stage.log, DIR/gpu-check-logs.tar.gz
# (DIR defaults to $OUT when set, as on the GPU machine, else
# runs/gpu-check). Exit status 1 when a stage failed or timed out.
# GPU_CHECK_DEVICE overrides the device (a dry run on cuda where none opens
# shows the failure path).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

DRY=0
OUTDIR=${OUT:-}
ONLY=""
BUDGET=360
while [ $# -gt 0 ]; do
    case "$1" in
    --dry-run) DRY=1 ;;
    --out) OUTDIR=$2; shift ;;
    --only) ONLY=$2; shift ;;
    --budget-s) BUDGET=$2; shift ;;
    -h | --help) sed -n '2,31p' "$0"; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "$OUTDIR" ] || OUTDIR="$ROOT/runs/gpu-check"
mkdir -p "$OUTDIR/logs"
OUTDIR=$(cd "$OUTDIR" && pwd)
LOGS="$OUTDIR/logs"
WORK="$OUTDIR/work"
rm -rf "$WORK" "$LOGS"/*
mkdir -p "$WORK"
SUMMARY="$OUTDIR/summary.txt"
: > "$SUMMARY"
T0=$(date +%s)

if [ "$DRY" = 1 ]; then
    DEV=cpu; DTYPE=fp32
    PRESET=tiny; VOCAB=512; SEQ=64; BATCH=2; STEPS=3
else
    DEV=cuda; DTYPE=bf16
    PRESET=gpt2-small; VOCAB=50304; SEQ=1024; BATCH=16; STEPS=20
fi
[ -n "${GPU_CHECK_DEVICE:-}" ] && DEV=$GPU_CHECK_DEVICE
PY=python3
[ -x "$ROOT/.venv/bin/python" ] && PY="$ROOT/.venv/bin/python"
WEFT="$ROOT/build/weft"
# The bundle's libraries (unpacked by the env stage into $ROOT/gpu-lib) for
# every stage; harmless where there is none.
export LD_LIBRARY_PATH="$ROOT/gpu-lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- the stage runner ------------------------------------------------------
declare -a ROWS=()
NOTE=""
N=0
FAILED=0
note() { NOTE="$*"; }
want() { [ -z "$ONLY" ] || [[ ",$ONLY," == *",$1,"* ]]; }
stage() { # name timeout function
    local name=$1 limit=$2 fn=$3 status rc t
    N=$((N + 1))
    local log
    log=$(printf '%s/%02d-%s.log' "$LOGS" "$N" "$name")
    if ! want "$name"; then
        ROWS+=("$(printf '%-11s %-8s %7s  %s' "$name" "skipped" "-" "not in --only")")
        return
    fi
    local left=$((BUDGET - ($(date +%s) - T0)))
    if [ "$left" -lt 10 ]; then
        ROWS+=("$(printf '%-11s %-8s %7s  %s' "$name" "skipped" "-" "the budget (${BUDGET} s) is spent")")
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (at most $limit s): $log"
    t=$(date +%s.%N)
    # The stage runs in a subshell under timeout; its note comes back in a file.
    export -f "$fn" note_file 2>/dev/null
    ( export STAGE_NOTE="$WORK/$name.note"; : > "$STAGE_NOTE"; timeout -k 5 "$limit" bash -c "$fn" ) > "$log" 2>&1
    rc=$?
    t=$(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    NOTE=$(tail -1 "$WORK/$name.note" 2>/dev/null)
    case $rc in
    0) status=ok ;;
    77) status=skipped ;;
    124 | 137) status=TIMEOUT; FAILED=1; NOTE="past ${limit} s; ${NOTE}" ;;
    *) status=FAIL; FAILED=1; [ -n "$NOTE" ] || NOTE="exit $rc: $(tail -1 "$log")" ;;
    esac
    ROWS+=("$(printf '%-11s %-8s %7s  %s' "$name" "$status" "$t" "$NOTE")")
    echo "   $status in $t s: $NOTE"
}
# A stage's one-line result: the last line written wins.
note_file() { echo "$*" >> "$STAGE_NOTE"; }

export ROOT DEV DTYPE PRESET VOCAB SEQ BATCH STEPS PY WEFT WORK DRY

# --- the stages ------------------------------------------------------------

st_env() {
    set -u
    echo "date: $(date -u)"
    echo "host: $(uname -a)"
    echo "glibc: $(ldd --version 2>&1 | head -1)"
    # The carried build without its libraries: unpack the bundle beside it.
    if [ -d "$ROOT/build/gpu-bundle" ] && ! ldd "$WEFT" 2>/dev/null | grep -q "not found" && [ -x "$WEFT" ]; then
        echo "build/weft finds its libraries"
    elif [ -x "$ROOT/build/gpu-bundle/unpack.sh" ]; then
        echo "unpacking build/gpu-bundle"
        "$ROOT/build/gpu-bundle/unpack.sh" "$ROOT" || exit 1
    fi
    if ldd "$WEFT" | grep "not found"; then
        note_file "build/weft misses libraries (above): make gpu-bundle and carry build/gpu-bundle"
        exit 1
    fi
    "$WEFT" --version 2>&1 | head -3
    local gpu="no GPU"
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || true
        gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)
    else
        echo "nvidia-smi: not installed"
    fi
    # where the dynamic loader would find each (LD_LIBRARY_PATH, then its cache)
    local lib d found
    for lib in libcudart.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2 libcupti.so.13; do
        found=""
        for d in ${LD_LIBRARY_PATH//:/ }; do
            [ -e "$d/$lib" ] && { found="$d/$lib"; break; }
        done
        [ -n "$found" ] || found=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }')
        printf '%-20s %s\n' "$lib" "${found:-not found}"
    done
    command -v nvcc >/dev/null && nvcc --version | tail -2
    "$PY" - <<'EOF' || true
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
except Exception as e:
    print("torch: not importable:", e)
EOF
    # The device's compute backend opens (the cuda backend: rebuilt with
    # this machine's nvcc if the carried one does not).
    if ! "$WEFT" ops-check --device "$DEV" --op add > "$WORK/open.txt" 2>&1; then
        cat "$WORK/open.txt"
        if [ "$DEV" = cuda ] && command -v nvcc >/dev/null && make -n cuda >/dev/null 2>&1; then
            echo "rebuilding the cuda backend here"
            make cuda || { note_file "$gpu; make cuda failed"; exit 1; }
            "$WEFT" ops-check --device "$DEV" --op add || { note_file "$gpu; the cuda backend does not open"; exit 1; }
        else
            note_file "$gpu; the $DEV backend does not open: $(tail -1 "$WORK/open.txt")"
            exit 1
        fi
    fi
    note_file "$gpu; the $DEV backend opens"
}

st_ceilings() {
    set -u
    "$WEFT" ops-check --device "$DEV" --perf --op matmul --json > "$WORK/mm.json" || exit 1
    local weft
    weft=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print('%.0f' % max(x['rate'] for x in r))" "$WORK/mm.json") || exit 1
    echo "weft matmul (ops-check --perf): best $weft GFLOP/s"
    "$PY" - "$DEV" > "$WORK/torch_ceil.txt" <<'EOF'
import sys, time
import torch
dev = sys.argv[1]
if dev == "cuda" and not torch.cuda.is_available():
    sys.exit("torch sees no GPU")
n, dt = (8192, torch.bfloat16) if dev == "cuda" else (512, torch.float32)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
def best(f, reps=5):
    f(); sync()
    b = float("inf")
    for _ in range(reps):
        t = time.perf_counter(); f(); sync(); b = min(b, time.perf_counter() - t)
    return b
a = torch.randn(n, n, device=dev, dtype=dt); b = torch.randn(n, n, device=dev, dtype=dt)
t = best(lambda: a @ b)
x = torch.empty(1 << 28 if dev == "cuda" else 1 << 22, dtype=torch.uint8, device=dev); y = torch.empty_like(x)
c = best(lambda: y.copy_(x))
print(f"torch.matmul {str(dt)[6:]} {n}^3: {2 * n**3 / t / 1e12:.2f} TFLOP/s; copy {2 * x.numel() / c / 1e9:.1f} GB/s")
EOF
    local rc=$?
    cat "$WORK/torch_ceil.txt"
    [ $rc -eq 0 ] || { note_file "weft matmul $weft GFLOP/s; torch failed"; exit 1; }
    note_file "weft matmul $weft GFLOP/s; $(cat "$WORK/torch_ceil.txt")"
}

st_ops() {
    set -u
    "$WEFT" ops-check --device "$DEV" --json > "$WORK/ops.json"
    local rc=$?
    local counts
    counts=$("$PY" -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(len(r), sum(not x['ok'] for x in r))" "$WORK/ops.json") || exit 1
    set -- $counts
    echo "ops-check: $1 outputs, $2 over their thresholds (exit $rc)"
    # the rates (dry run: one op, the cpu's rates are bench/README.md's)
    if [ "$DRY" = 1 ]; then "$WEFT" ops-check --device "$DEV" --perf --op add || exit 1
    else "$WEFT" ops-check --device "$DEV" --perf || exit 1; fi
    local san="compute-sanitizer: skipped"
    if [ "$DEV" = cuda ] && command -v compute-sanitizer >/dev/null; then
        if compute-sanitizer --tool memcheck --error-exitcode 9 "$WEFT" ops-check --device cuda --op rmsnorm_fwd; then
            san="memcheck clean"
        elif [ $? -eq 9 ]; then
            note_file "$1 outputs, $2 failed; memcheck found errors"; exit 1
        else
            san="compute-sanitizer refused (skipped)"
        fi
    fi
    note_file "$1 outputs, $2 failed; $san"
    [ "$rc" -eq 0 ]
}

# A dataset of the repository's own text: its tokens do not matter here.
make_data() {
    [ -d "$WORK/data" ] && return 0
    "$WEFT" tokenizer train --vocab-size 512 --output "$WORK/tok.json" "$ROOT"/docs/*.md "$ROOT/README.md" &&
        "$WEFT" tokenize --tokenizer "$WORK/tok.json" --output "$WORK/data" --val-fraction 0.05 "$ROOT"/docs/*.md \
            "$ROOT/README.md"
}
export -f make_data

train_tiny() { # run_dir extra...
    local run=$1
    shift
    "$WEFT" train --data "$WORK/data" --run-dir "$run" --preset tiny --seq-len 64 --batch-size 4 --steps 5 \
        --device "$DEV" --train.eval_every=0 --metrics.peak_tflops=1 --ckpt.every=0 "$@"
}
export -f train_tiny

losses() { grep -o 'loss [0-9.]*' "$1" | head -20 | tr '\n' ' '; }
export -f losses

st_model() {
    set -u
    make_data || exit 1
    train_tiny "$WORK/m1" > "$WORK/m1.out" || exit 1
    train_tiny "$WORK/m2" > "$WORK/m2.out" || exit 1
    local a b
    a=$(losses "$WORK/m1.out"); b=$(losses "$WORK/m2.out")
    echo "run 1: $a"; echo "run 2: $b"
    [ -n "$a" ] && [ "$a" = "$b" ] || { note_file "two runs differ"; exit 1; }
    cmp "$WORK/m1/model.safetensors" "$WORK/m2/model.safetensors" || { note_file "two runs' weights differ"; exit 1; }
    # stop at step 3, resume to 5: the same weights, bit for bit
    train_tiny "$WORK/m3" --ckpt.stop_at=3 > /dev/null
    [ $? -eq 75 ] || { note_file "the stop at step 3 did not exit 75"; exit 1; }
    train_tiny "$WORK/m3" > "$WORK/m3.out" || exit 1
    cmp "$WORK/m1/model.safetensors" "$WORK/m3/model.safetensors" || { note_file "the resumed run differs"; exit 1; }
    local vs="vs PyTorch: skipped (no pytest)"
    if "$PY" -c "import pytest, torch" 2>/dev/null; then
        if timeout 60 "$PY" -m pytest -q -x "$ROOT/tests/py/test_model_vs_torch.py" -k "loss or logits"; then
            vs="vs PyTorch (cpu): passed"
        else
            note_file "bitwise repeatable, exact resume; vs PyTorch failed"; exit 1
        fi
    fi
    note_file "bitwise repeatable, exact resume; $vs"
}

st_throughput() {
    set -u
    make_data || exit 1
    local run="$WORK/tp"
    "$WEFT" train --data "$WORK/data" --run-dir "$run" --preset "$PRESET" --model.vocab_size="$VOCAB" \
        --seq-len "$SEQ" --batch-size "$BATCH" --steps "$STEPS" --device "$DEV" --train.dtype="$DTYPE" \
        --train.eval_every=0 --ckpt.every=0 > "$WORK/tp.out" || exit 1
    local w
    w=$("$PY" - "$run/metrics.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tail = rows[len(rows) // 2:] or rows  # past the warm-up
tps = sum(r["tokens_per_s"] for r in tail) / len(tail)
mfu = sum(r.get("mfu_pct", 0) for r in tail) / len(tail)
print(f"weft {tps:.0f} tok/s, MFU {mfu:.1f}%, arena peak {max(r['arena_peak'] for r in rows) / 2**30:.2f} GiB")
EOF
    ) || exit 1
    echo "$w"
    local flags=(--preset "$PRESET" --batch "$BATCH" --seq "$SEQ" --steps 3 --device "$DEV" --json)
    if "$PY" -c "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)" 2>/dev/null; then
        flags+=(--sdpa --fused)
    fi
    [ "$DTYPE" = bf16 ] && flags+=(--bf16)
    local t="torch: not run"
    if "$PY" "$ROOT/bench/train_step_torch.py" "${flags[@]}" > "$WORK/torch.json"; then
        t=$("$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print('torch eager %.0f tok/s' % d['tokens_per_s'])" "$WORK/torch.json")
        echo "$t"
        local left=$((${BUDGET_LEFT:-0}))
        if [ "$DEV" = cuda ] && [ "$left" -gt 120 ]; then
            "$PY" "$ROOT/bench/train_step_torch.py" "${flags[@]}" --compile > "$WORK/torch_compile.json" &&
                t="$t, compiled $("$PY" -c "import json,sys; print('%.0f' % json.load(open(sys.argv[1]))['tokens_per_s'])" "$WORK/torch_compile.json")"
        fi
    fi
    note_file "$w; $t"
}

st_trace() {
    set -u
    make_data || exit 1
    train_tiny "$WORK/tr" --steps 3 --trace.active=1 --trace.warmup=0 > /dev/null || exit 1
    "$WEFT" trace analyze "$WORK/tr/traces" > "$WORK/trace.txt" || exit 1
    cat "$WORK/trace.txt"
    # rank 0's line of the temporal breakdown: span, compute ms and share
    note_file "$(awk '/^Temporal breakdown/ { getline; getline; printf "span %s ms, compute %s ms (%s)", $2, $3, $4; exit }' "$WORK/trace.txt")"
}

echo "gpu_check: device $DEV$([ "$DRY" = 1 ] && echo ' (dry run: cpu backend, tiny sizes)'), logs in $LOGS"
stage env 60 st_env
stage ceilings 90 st_ceilings
stage ops 90 st_ops
stage model 90 st_model
export BUDGET_LEFT=$((BUDGET - ($(date +%s) - T0)))
stage throughput 120 st_throughput
stage trace 45 st_trace

{
    echo "gpu_check summary: device $DEV$([ "$DRY" = 1 ] && echo ' (dry run)'), $(date -u), $(($(date +%s) - T0)) s"
    printf '%-11s %-8s %7s  %s\n' stage status seconds result
    for r in "${ROWS[@]}"; do echo "$r"; done
} | tee "$SUMMARY"
tar -C "$OUTDIR" -czf "$OUTDIR/gpu-check-logs.tar.gz" summary.txt logs
echo "gpu_check: logs packed in $OUTDIR/gpu-check-logs.tar.gz"
exit $FAILED
