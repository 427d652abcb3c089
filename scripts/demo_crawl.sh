#!/usr/bin/env bash
# The main job from the crawl: serve local HTML (R's manuals and pages, from
# Debian's r-doc-html and r-base-core) on 127.0.0.1, crawl it with wget into a
# WARC, clean it with `weft prep` (HTML to text, Unicode, paragraph dedup,
# language id, quality rules, near-duplicate removal), train a tokenizer on
# the result, tokenize it, train a small model for a few steps and sample.
# Nothing leaves the machine. Outputs go to runs/demo-crawl/ (RUN_DIR=... to
# change); STEPS=N trains longer (default 50).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh
echo "[crawl] building"
make -j"$(nproc 2>/dev/null || echo 2)" >/dev/null

RUN=${RUN_DIR:-runs/demo-crawl}
STEPS=${STEPS:-50}
WEFT=build/weft
SITE=/usr/share/R/doc
rm -rf "$RUN"
mkdir -p "$RUN"

echo "[crawl] serving $SITE on 127.0.0.1 and crawling it with wget"
python3 -u -m http.server 0 --bind 127.0.0.1 --directory "$SITE" >"$RUN/http.log" 2>&1 &
SERVER=$!
trap 'kill "$SERVER" 2>/dev/null || true' EXIT
PORT=""
for _ in $(seq 100); do
  PORT=$(sed -n 's/.*port \([0-9][0-9]*\).*/\1/p' "$RUN/http.log" | head -1)
  [ -n "$PORT" ] && break
  sleep 0.1
done
[ -n "$PORT" ] || { echo "[crawl] the HTTP server did not start"; cat "$RUN/http.log"; exit 1; }
# wget exits 8 when some links are broken (R's pages link a manual Debian
# does not ship): that is fine for a crawl.
wget -q -r -l 2 --no-parent -e robots=off --no-proxy --tries=3 --timeout=10 -Q 50m \
  --reject pdf,jpg,png,ico,svg,js,css,gz,rds,db \
  --warc-file="$RUN/crawl" -P "$RUN/site" "http://127.0.0.1:$PORT/" || [ $? -eq 8 ]
kill "$SERVER" 2>/dev/null || true
rm -rf "$RUN/site"
ls -l "$RUN/crawl.warc.gz"

echo "[crawl] cleaning the crawl with weft prep"
$WEFT prep --output "$RUN/clean" "$RUN/crawl.warc.gz"

echo "[crawl] training a tokenizer (vocabulary 4096) on the clean text"
$WEFT tokenizer train --vocab-size 4096 --output "$RUN/tokenizer.json" "$RUN"/clean/en/*.jsonl.zst

echo "[crawl] tokenizing"
$WEFT tokenize --tokenizer "$RUN/tokenizer.json" --output "$RUN/data" --val-fraction 0.25 "$RUN"/clean/en/*.jsonl.zst
$WEFT data inspect "$RUN/data"

echo "[crawl] training for $STEPS steps (configs/austen-small.toml)"
$WEFT train --config configs/austen-small.toml --data.dir="$RUN/data" --train.run_dir="$RUN" \
  --data.tokenizer="$RUN/tokenizer.json" --train.steps="$STEPS" --train.eval_every="$STEPS" \
  --optim.warmup_steps=$(( STEPS < 30 ? STEPS / 2 : 30 ))

echo "[crawl] what the model says:"
$WEFT sample --model "$RUN" --prompt "The R language" --max-tokens 40 --seed 1
