#!/usr/bin/env bash
# The main job: set up, build, then run weft's pipeline on the default corpus
# (Jane Austen, data/corpus/austen): train a byte-level BPE tokenizer, tokenize
# the corpus into token shards with a validation split, verify the shards, show
# the first batch the data loader serves, train a small Llama-style model
# (configs/austen-small.toml, a few minutes on 2 cores) and print samples.
# Outputs go to runs/demo/ (RUN_DIR=... to change).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "[demo] building"
make -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

RUN=${RUN_DIR:-runs/demo}
WEFT=build/weft
mkdir -p "$RUN"

echo "[demo] training a tokenizer (vocabulary 8192) on data/corpus/austen"
$WEFT tokenizer train --vocab-size 8192 --output "$RUN/tokenizer.json" data/corpus/austen/*.txt

echo "[demo] tokenizing the corpus"
rm -rf "$RUN/data"
$WEFT tokenize --tokenizer "$RUN/tokenizer.json" --output "$RUN/data" --val-fraction 0.05 data/corpus/austen/*.txt

echo "[demo] verifying the shards"
$WEFT data inspect "$RUN/data" --verify

echo "[demo] the first training batch, decoded"
$WEFT data batch "$RUN/data" --tokenizer "$RUN/tokenizer.json" --batch 2 --seq-len 64

echo "[demo] training a 3.3M-parameter model (configs/austen-small.toml)"
$WEFT train --config configs/austen-small.toml --data.dir="$RUN/data" --train.run_dir="$RUN" \
  --data.tokenizer="$RUN/tokenizer.json" --no-resume ${DEMO_STEPS:+--train.steps=$DEMO_STEPS}

echo "[demo] what an untrained model of the same size says (the baseline):"
$WEFT train --config configs/austen-small.toml --data.dir="$RUN/data" --train.run_dir="$RUN/untrained" \
  --data.tokenizer="$RUN/tokenizer.json" --no-resume --train.steps=1 --optim.lr=0 --optim.min_lr=0 \
  --train.eval_every=0 >/dev/null 2>&1
$WEFT sample --model "$RUN/untrained" --prompt "It is a truth universally acknowledged" \
  --max-tokens 60 --seed 1 2>/dev/null
echo
echo "[demo] what the trained model says:"
$WEFT sample --model "$RUN" --prompt "It is a truth universally acknowledged" --max-tokens 120 --seed 1
$WEFT sample --model "$RUN" --prompt "Mr. Darcy" --max-tokens 120 --seed 2
