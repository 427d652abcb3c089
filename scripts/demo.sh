#!/usr/bin/env bash
# The main job: set up, build, then run weft's pipeline on the default corpus
# (Jane Austen, data/corpus/austen): train a byte-level BPE tokenizer, tokenize
# the corpus into token shards with a validation split, verify the shards, and
# show the first batch the data loader serves, decoded back to text.
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
