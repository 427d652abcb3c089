#!/usr/bin/env bash
# Writes the seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/,
# from files weft writes and reads: the format fixtures
# (tests/fixtures/formats/v1), the repository's configs, a tokenizer and
# dataset made by weft's commands, trace files written by the real tracer,
# WARC/WET files in the layout crawls ship, and the files each target's own
# setup writes with weft's writers (WEFT_FUZZ_SEED_OUT). Run once after
# `make` and commit the output (kept small: under about 2 MB in all).
#   tests/fuzz/make_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
B=build
W=$B/weft
for need in "$W" "$B/fuzz/ckpt_manifest" "$B/tests/tools/trace_gen"; do
  [ -x "$need" ] || { echo "build weft first (make): $need is missing" >&2; exit 1; }
done
C=tests/fuzz/corpus
FX=tests/fixtures/formats/v1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
rm -rf "$C"
for t in config tokenizer_json shard dataset_json ckpt_manifest ckpt_roundtrip safetensors hf_config warc html \
         docs_jsonl trace_json mix_spec prep_inter s3_xml; do mkdir -p "$C/$t"; done
PY=python3

# ---- config: the repository's configs, the effective config a run records,
# and overrides after a NUL (tests/fuzz/fuzz_config.c).
for f in configs/*.toml; do cp "$f" "$C/config/$(basename "$f")"; done
TEXT=$(ls -S data/corpus/austen/*.txt | head -1)
head -c 20000 "$TEXT" > "$TMP/text.txt"
head -c 12000 "$TEXT" > "$TMP/small.txt"
$W tokenizer train --vocab-size 280 --output "$TMP/tok.json" --specials '<|begin_of_text|>,<|end_of_text|>,<|pad|>,<|x|>' \
  "$TMP/text.txt" >/dev/null
$W tokenize --tokenizer "$TMP/tok.json" --output "$TMP/ds" --text-mode paragraph --shard-tokens 1500 \
  --val-fraction 0.2 --seed 3 "$TMP/small.txt" >/dev/null
$W train --model.preset tiny --model.dim 16 --model.n_layers 1 --model.n_heads 2 --model.n_kv_heads 1 \
  --model.max_seq_len 16 --model.vocab_size 280 --data.dir "$TMP/ds" --data.tokenizer "$TMP/tok.json" \
  --data.seq_len 8 --data.batch_size 2 --steps 2 --ckpt.every 2 --ckpt.async false --train.eval_every 0 \
  --metrics.tensorboard false --metrics.peak_tflops 1 --threads 1 --run-dir "$TMP/run" >/dev/null 2>&1
cp "$TMP/run/config.toml" "$C/config/run-config.toml" 2>/dev/null || true
printf '[train]\nsteps = 3\n\0--lr=0.5\0--model.dim\00064\0--no-ckpt.async\0' > "$C/config/overrides"
printf 'a.b.c = [1, 2.5e3, "x", '\''y'\'', [true]]\n"q k" = """multi\nline"""\n\0--threads=2\0' > "$C/config/syntax"
printf '[prep]\n\0--output\0out\0in.warc.gz\0' > "$C/config/prep-positional"

# ---- tokenizer.json: the format fixture and one with special tokens.
cp "$FX/tokenizer.json" "$C/tokenizer_json/fixture-v1.json"
cp "$TMP/tok.json" "$C/tokenizer_json/trained.json"

# ---- token shards and dataset.json.
cp "$FX/dataset/val-00001.wfs" "$C/shard/fixture-val-00001.wfs"
for f in train-00000 val-00000; do cp "$TMP/ds/$f.wfs" "$C/shard/$f.wfs"; done
cp "$FX/dataset/dataset.json" "$C/dataset_json/fixture-v1.json"
cp "$TMP/ds/dataset.json" "$C/dataset_json/tokenized.json"
WEFT_FUZZ_SEED_OUT="$C/dataset_json/own.json" $B/fuzz/dataset_json "$C/dataset_json/tokenized.json" 2>/dev/null

# ---- checkpoints: the target's own (matching its data file) and real ones.
WEFT_FUZZ_SEED_OUT="$C/ckpt_manifest/own.json" $B/fuzz/ckpt_manifest "$C/dataset_json/tokenized.json" 2>/dev/null
cp "$FX/checkpoint/manifest.json" "$C/ckpt_manifest/fixture-v1.json"
cp "$TMP"/run/checkpoints/step-*/manifest.json "$C/ckpt_manifest/train-run.json"
head -c 600 /dev/urandom > "$C/ckpt_roundtrip/random-600"
printf '\003\004name\002\002\003\003\004key1\001' > "$C/ckpt_roundtrip/small"

# ---- safetensors and HF config.json.
cp "$TMP/run/model.safetensors" "$C/safetensors/train-run.safetensors"
$W export --checkpoint "$TMP/run" --output "$TMP/hf" >/dev/null
cp "$TMP/hf/config.json" "$C/hf_config/exported-run.json"
WEFT_FUZZ_SEED_OUT="$C/hf_config/own.json" $B/fuzz/hf_config "$C/hf_config/exported-run.json" 2>/dev/null

# ---- WARC/WET (one gzip member per record, plain, zstd), HTML, JSONL.
$PY - "$C" <<'PYEOF'
import gzip, json, sys
c = sys.argv[1]
html = [b"<html><head><title>Pride</title><style>p{}</style></head><body><h1>It is a truth</h1>"
        b"<p>universally <b>acknowledged</b>, that a single man&nbsp;in possession &amp; of a good fortune"
        b"</p><script>var x=1;</script><ul><li>one</li><li>two</li></ul><pre>  kept\n as is</pre></body></html>",
        b"<!DOCTYPE html><html><body><table><tr><td>caf\xc3\xa9</td><td>&#x263A; &eacute;</td></tr></table>"
        b"<div>line<br>break</div><p>unclosed <i>italic</body>",
        b"<html><head><meta charset=\"iso-8859-1\"></head><body><p>na\xefve</p></body></html>"]
for i, h in enumerate(html):
    open(f"{c}/html/page{i}.html", "wb").write(h)
def rec(kind, uri, block, extra=b""):
    return (b"WARC/1.0\r\nWARC-Type: %s\r\nWARC-Target-URI: %s\r\n%sContent-Length: %d\r\n\r\n"
            % (kind, uri, extra, len(block))) + block + b"\r\n\r\n"
info = rec(b"warcinfo", b"", b"software: weft seeds\r\n")
resp = [rec(b"response", b"http://127.0.0.1/p%d" % i,
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + h,
            b"Content-Type: application/http; msgtype=response\r\n")
        for i, h in enumerate(html)]
req = rec(b"request", b"http://127.0.0.1/p0", b"GET /p0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
wet = [rec(b"conversion", b"http://127.0.0.1/p%d" % i, t, b"Content-Type: text/plain\r\n")
       for i, t in enumerate([b"It is a truth universally acknowledged.", "caf\u00e9 \u263a".encode()])]
open(f"{c}/warc/crawl.warc", "wb").write(info + req + b"".join(resp))
open(f"{c}/warc/crawl.warc.gz", "wb").write(b"".join(gzip.compress(r) for r in [info, req] + resp))
open(f"{c}/warc/crawl.warc.wet.gz", "wb").write(b"".join(gzip.compress(r) for r in [info] + wet))
open(f"{c}/warc/one-member.warc.gz", "wb").write(gzip.compress(info + b"".join(wet)))
docs = [{"text": "It is a truth universally acknowledged.", "id": 1},
        {"text": "caf\u00e9 \u263a \"quoted\"\nnewline", "url": "http://x"}, {"text": ""}]
open(f"{c}/docs_jsonl/docs.jsonl", "w").write("\n".join(json.dumps(d) for d in docs) + "\n\n")
open(f"{c}/docs_jsonl/ascii.jsonl", "w").write("\n".join(json.dumps(d, ensure_ascii=False) for d in docs) + "\n")
PYEOF
if command -v zstd >/dev/null; then zstd -q -c "$C/warc/crawl.warc" > "$C/warc/crawl.warc.zst"; fi

# ---- mixture spec: data.sources items, then data.weight_schedule items (tests/fuzz/fuzz_mix_spec.c).
printf '\001pp:0.7\0emma:0.3\0006: 0.2 0.8\0009: 0.5 0.5' > "$C/mix_spec/two-sources"
printf '\004web=data/web:0.5\0books=data/books/:0.3\0code=x=y/z:0.125\0d:2\0e:0.000001\000100: 1 0 0 0 0' \
  > "$C/mix_spec/five-sources"
printf '\000a:1\0007: 1' > "$C/mix_spec/one-source"

# ---- prep intermediate files: a real run's, stopped before its finish step
# (WEFT_PREP_CRASH), one of each kind; the first byte is the kind, +128 for
# the target to rewrite the header (tests/fuzz/fuzz_prep_inter.c).
head -c 12000 "$TEXT" > "$TMP/prep.txt"
cp "$TMP/prep.txt" "$TMP/prep2.txt"
WEFT_PREP_CRASH=finish:0 $W prep --output "$TMP/prep" --threads=1 --text-mode paragraph --dedup.ranges=2 \
  --minhash.bands=3 --minhash.rows=2 --quality.enabled=false --langid.enabled=false "$TMP/prep.txt" "$TMP/prep2.txt" \
  >/dev/null 2>&1 || true
P=$TMP/prep/_prep
for kf in "1 extract/000000.docs" "2 extract/000000.r0000" "3 dedup/000001.r0000" "4 filter/000000.b0000" \
          "5 lsh/0000.edges" "6 cluster/drops" "7 output/000000.index" "8 output/000000.blob"; do
  set -- $kf
  name=$(echo "$2" | tr '/.' '--')
  { printf "\\$(printf '%03o' "$1")"; cat "$P/$2"; } > "$C/prep_inter/$name"
  { printf "\\$(printf '%03o' $(($1 + 128)))"; cat "$P/$2"; } > "$C/prep_inter/$name-fixed"
done

# ---- trace JSON: the real tracer's output (tests/tools/trace_gen).
$B/tests/tools/trace_gen "$TMP/tr" 0 1 hta >/dev/null
i=0
for f in $(find "$TMP/tr" -name '*.json' | sort); do
  cp "$f" "$C/trace_json/hta-$i.json"; i=$((i + 1))
done

# ---- S3 XML answers (tests/fuzz/fuzz_s3_xml.c): the first byte picks the
# parser ('0': a ListObjectsV2 page, '1': an <Error> body), shaped as S3
# servers answer: a full page, a truncated one with its token, keys with
# entities and character references, and error bodies.
H='<?xml version="1.0" encoding="UTF-8"?>'
L='<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>weft</Name>'
printf '0%s%s<Prefix>data/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated><Contents><Key>data/train-00000.wfs</Key><LastModified>2026-11-29T01:02:03.000Z</LastModified><ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1048640</Size><StorageClass>STANDARD</StorageClass></Contents><Contents><Key>data/dataset.json</Key><Size>912</Size></Contents></ListBucketResult>' "$H" "$L" > "$C/s3_xml/list-page"
printf '0%s%s<Prefix>many/</Prefix><KeyCount>1</KeyCount><MaxKeys>1</MaxKeys><IsTruncated>true</IsTruncated><NextContinuationToken>1/Zm9v+YmFy==</NextContinuationToken><Contents><Key>many/k00000</Key><Size>11</Size></Contents></ListBucketResult>' "$H" "$L" > "$C/s3_xml/list-truncated"
printf '0%s%s<Prefix></Prefix><IsTruncated>false</IsTruncated><Contents><Key>a &amp; b/&lt;x&gt;/&#233;&#x65E5;&apos;&quot;.txt</Key><Size>0</Size></Contents></ListBucketResult>' "$H" "$L" > "$C/s3_xml/list-entities"
printf '0%s%s<Prefix>none/</Prefix><KeyCount>0</KeyCount><IsTruncated>false</IsTruncated></ListBucketResult>' "$H" "$L" > "$C/s3_xml/list-empty"
printf '1%s<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message><Key>no/such/key</Key><RequestId>17A2B3C4D5E6F708</RequestId></Error>' "$H" > "$C/s3_xml/error-nosuchkey"
printf '1%s<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided. Check your key and signing method.</Message><AWSAccessKeyId>weft-test-key</AWSAccessKeyId></Error>' "$H" > "$C/s3_xml/error-signature"
printf '1%s<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>' "$H" > "$C/s3_xml/error-slowdown"

du -sh "$C"
