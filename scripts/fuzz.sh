#!/usr/bin/env bash
# Runs weft's fuzz targets (tests/fuzz/, docs/fuzzing.md) with libFuzzer.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#       A campaign: each target (default: all) for SECONDS_PER_TARGET
#       (default 600) with FUZZ_JOBS parallel workers (default: the cores),
#       starting from its seed corpus and regression inputs. New inputs that
#       add coverage go to build-fuzz/corpus/<target>/ (kept between
#       campaigns); with FUZZ_SAVE=1 they are merged (minimised) into
#       tests/fuzz/corpus/<target>/ to commit.
#   scripts/fuzz.sh --check [SECONDS_PER_TARGET]
#       What scripts/check.sh runs: every target, one worker, 15 s each by
#       default, on a throwaway copy of the corpus.
#
# Builds build-fuzz/fuzz/ first (make fuzz). Crashes, leaks, timeouts and
# out-of-memory inputs are saved under build-fuzz/findings/<date>/; the
# script prints each reproducer's path and exits 1 if there is any. A
# finding is replayed with `build-fuzz/fuzz/<target> FILE`; once fixed, copy
# it into tests/fuzz/regressions/<target>/ (the normal tests replay it).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

CHECK=0
if [ "${1:-}" = "--check" ]; then CHECK=1; shift; fi
if [ $CHECK = 1 ]; then SECS=${1:-15}; else SECS=${1:-600}; fi
[ $# -gt 0 ] && shift
ALL=()
for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; ALL+=("${n%.c}"); done
if [ $CHECK = 0 ] && [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL[@]}"); fi
JOBS=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ $CHECK = 1 ] && JOBS=1

if ! log=$(make -j"$(nproc 2>/dev/null || echo 2)" WERROR=1 fuzz 2>&1); then
  echo "$log" | tail -40
  echo "[fuzz] make fuzz failed"
  exit 1
fi

OUT=$PWD/build-fuzz/findings/$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
found=0
for t in "${TARGETS[@]}"; do
  exe=build-fuzz/fuzz/$t
  [ -x "$exe" ] || { echo "[fuzz] no target $t (targets: ${ALL[*]})"; exit 1; }
  if [ $CHECK = 1 ]; then
    corpus=$TMP/corpus-$t
  else
    corpus=$ROOT/build-fuzz/corpus/$t
  fi
  mkdir -p "$corpus" "$TMP/work-$t"
  seeds=(tests/fuzz/corpus/$t)
  [ -d tests/fuzz/regressions/$t ] && seeds+=(tests/fuzz/regressions/$t)
  args=(-max_total_time="$SECS" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$OUT/$t-" "$corpus")
  for s in "${seeds[@]}"; do args+=("$PWD/$s"); done
  if [ "$JOBS" -gt 1 ]; then args=(-jobs="$JOBS" -workers="$JOBS" "${args[@]}"); fi
  # TMPDIR: the targets' scratch files, removed with $TMP.
  start=$(date +%s)
  set +e
  (cd "$TMP/work-$t" && TMPDIR="$TMP/work-$t" "$ROOT/$exe" "${args[@]}" >"$TMP/$t.log" 2>&1)
  rc=$?
  set -e
  cat "$TMP/work-$t"/fuzz-*.log >>"$TMP/$t.log" 2>/dev/null || true
  runs=$(grep -h 'stat::number_of_executed_units' "$TMP/$t.log" | awk '{s += $2} END {print s + 0}')
  n=$(find "$corpus" -type f | wc -l)
  secs=$(($(date +%s) - start))
  finds=$(find "$OUT" -maxdepth 1 -name "$t-*" -type f | sort)
  if [ -n "$finds" ] || [ $rc -ne 0 ]; then
    found=1
    cp "$TMP/$t.log" "$OUT/$t.log"
    echo "[fuzz] $t: FAILED after ${secs} s, $runs runs (exit $rc; log $OUT/$t.log)"
    for f in $finds; do echo "[fuzz]   reproducer: $f   (replay: $exe $f)"; done
    grep -m3 -E 'ERROR|check failed|runtime error' "$TMP/$t.log" | sed 's/^/[fuzz]   /' || true
  else
    echo "[fuzz] $t: ${secs} s, $runs runs, no findings ($n new corpus inputs)"
  fi
  if [ $CHECK = 0 ] && [ "${FUZZ_SAVE:-0}" = 1 ] && [ "$n" -gt 0 ]; then
    "$exe" -merge=1 "tests/fuzz/corpus/$t" "$corpus" >/dev/null 2>&1
    echo "[fuzz]   merged into tests/fuzz/corpus/$t ($(find tests/fuzz/corpus/$t -type f | wc -l) inputs)"
  fi
done
[ $found = 0 ] || { echo "[fuzz] findings under $OUT"; exit 1; }
rmdir "$OUT" 2>/dev/null || true
