#!/usr/bin/env bash
# Sets everything up and runs every test: the setup script, the build with
# gcc and with clang (warnings are errors), the CUDA backend with nvcc, the AddressSanitizer +
# UndefinedBehaviorSanitizer and ThreadSanitizer builds, the libFuzzer build
# with each fuzz target run for a short fixed time (FUZZ_SECONDS, default 15
# s each; docs/fuzzing.md), the tests marked asan (a chosen set of the MPI
# tests) against the AddressSanitizer build, then pytest, which runs
# every C unit test in each of those builds, the fuzz targets over their
# seeds and regression inputs, and the Python end-to-end and
# interoperability tests. Ends with pytest's summary line; exits non-zero
# on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each stage prints its wall time when it ends ("[check] <stage>: 41 s"),
# and pytest lists the ten slowest tests before its summary line
# (--durations=10): the whole run must stay under 40 minutes on CI's
# 2-core machine, and these say where the time goes when it grows.
CHECK_T0=$SECONDS
STAGE_T0=$SECONDS
stage_done() {
  echo "[check] $1: $((SECONDS - STAGE_T0)) s (total $((SECONDS - CHECK_T0)) s)"
  STAGE_T0=$SECONDS
}

scripts/setup.sh
stage_done setup

JOBS=$(nproc 2>/dev/null || echo 2)
build() {
  local name=$1; shift
  echo "[check] build $name"
  local log
  if ! log=$(make -j"$JOBS" WERROR=1 "$@" 2>&1); then
    echo "$log" | tail -60
    echo "[check] build $name failed"
    exit 1
  fi
  stage_done "build $name"
}
build gcc
build clang CC=clang BUILD=build-clang
# The CUDA backend by nvcc (ptxas warnings as errors; one line where there
# is no nvcc). `make` builds its emulated twin, cudaemu, in every build.
build cuda cuda
build asan+ubsan SANITIZE=address,undefined
build tsan SANITIZE=thread
build fuzz fuzz

# Before pytest, so that pytest's summary line stays the last line.
echo "[check] fuzz: each target ${FUZZ_SECONDS:-15} s"
if ! scripts/fuzz.sh --check "${FUZZ_SECONDS:-15}"; then
  echo "[check] fuzz: a target failed (reproducers above)"
  exit 1
fi
stage_done fuzz

# The tests marked asan against the AddressSanitizer + UBSan build: a
# chosen set of the MPI tests, every rank instrumented, LeakSanitizer
# included (tests/lsan.supp keeps the MPI libraries' own leaks out), and
# regression tests of leaks found there. 30 to 40 s; docs/robustness.md,
# "Sanitizers". Before pytest, for the same reason as the fuzz targets.
echo "[check] MPI tests under AddressSanitizer"
if ! WEFT_BUILD=build-address-undefined .venv/bin/python -m pytest tests/py -q -p no:cacheprovider \
    -m asan; then
  echo "[check] MPI tests under AddressSanitizer: a test failed (above)"
  exit 1
fi
stage_done "MPI tests under AddressSanitizer"

export WEFT_SAN_BUILDS="build-clang build-address-undefined build-thread"
echo "[check] tests"
set +e
.venv/bin/python -m pytest tests/py -q -p no:cacheprovider --durations=10 "$@"
rc=$?
set -e
# pytest exits 5 when it collected nothing: that is a failure here too.
exit $rc
