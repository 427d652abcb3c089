#!/usr/bin/env bash
# Makes the interpreter the model-step benchmark runs its torch.compile peer
# in: a venv of its own with the current PyTorch release from PyPI (the test
# venv keeps Debian's python3-torch, 1.13, as the tests' reference). Only
# benchmarks use it; no test does. About 5 GB (the wheel brings CUDA's
# libraries, unused here).
#   bench/torch_venv.sh [DIR]        (default /tmp/weft-bench-torch)
#   .venv/bin/python bench/train_step_compare.py --compile-python DIR/bin/python
set -euo pipefail
DIR=${1:-/tmp/weft-bench-torch}
python3 -m venv "$DIR"
"$DIR/bin/pip" install --quiet --upgrade pip
"$DIR/bin/pip" install --quiet torch numpy
"$DIR/bin/python" -c "import torch; print('torch', torch.__version__)"
