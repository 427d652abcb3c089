#!/usr/bin/env bash
# Makes the interpreter the prep benchmarks run their peers in (datatrove,
# trafilatura): a venv of its own, never the test venv (datatrove needs
# numpy 2, the test venv's torch numpy 1), with the current releases from
# PyPI (xxhash below 4: datatrove 0.10 hashes str, which xxhash 4 refuses).
# Only the benchmarks use it; no test does.
#   bench/peer_venv.sh [DIR]        (default /tmp/weft-bench-peers)
#   .venv/bin/python bench/prep_dist_bench.py --peer-python DIR/bin/python
set -euo pipefail
DIR=${1:-/tmp/weft-bench-peers}
python3 -m venv "$DIR"
"$DIR/bin/pip" install --quiet --upgrade pip
"$DIR/bin/pip" install --quiet datatrove trafilatura lxml_html_clean warcio "xxhash<4" tokenizers spacy
"$DIR/bin/python" -c "import datatrove, importlib.metadata as m; print('datatrove', m.version('datatrove'))"
