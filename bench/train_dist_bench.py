"""Data-parallel training throughput of `weft train` at 1 and 2 ranks against
PyTorch DistributedDataParallel, and the communication model of
docs/distributed.md checked against what a training step spends in its
gradient all-reduce.

    .venv/bin/python bench/train_dist_bench.py [--config configs/austen-small.toml]
        [--steps 12] [--warmup 3] [--rounds 4] [--impl openmpi|mpich]
        [--batch B] [--seq T] [--core SkylakeX] [--json FILE] [--keep DIR] [--quick]

What it runs, per round (the order of the configs and of the two peers
reversed every other round, so that on a shared machine neither always
runs first; each run's median step is printed as it ends):
- weft: `build/weft train` on the Austen corpus (tokenized into a temporary
  folder first: a tokenizer of 8192 ids, shards with a 5% validation split)
  for N steps, at W = 1 (one process, 2 threads) and W = 2 (`mpirun.openmpi
  -np 2 --bind-to none`, or `mpiexec.mpich -n 2`, 1 thread per rank), the
  same global batch (data.batch_size is the global micro-batch). weft
  runs Open MPI's non-blocking all-reduce as a ring by default (it sets
  OMPI_MCA_coll_libnbc_iallreduce_algorithm=1, docs/distributed.md); with
  Open MPI also W = 2 with that variable at 0, libnbc's own choice (a
  binomial tree for weft's in-place calls), to show the difference; and, if
  `weft train --help` lists a zero1 option, W = 2 with `--dist.zero1 true`.
  Step times and tokens/s come from RUN_DIR/metrics.jsonl (rank 0's),
  leaving out the first `warmup` steps and the last one (it waits for the
  final checkpoint save). The timed steps are traced (--trace.active), and
  the traces give the time each rank spent in communication per step;
- PyTorch 1.13 (the peer): DistributedDataParallel (gloo, 25 MB buckets like
  weft's dist.bucket_mb) over the same Llama (tests/reference/llama_ref.py,
  set up as bench/train_step_torch.py does: same init, AdamW and clipping)
  with the model sizes weft reports, W = 1 (2 threads) and 2 (1 thread
  each), each rank B/W random sequences of T tokens; started as W plain
  processes with MASTER_ADDR=127.0.0.1 (no torchrun). Rank 0's step times;
  with ZeRO-1 in weft, DDP + ZeroRedundancyOptimizer as its peer;
- `build/bench/allreduce_bench` under the same launcher at 2 ranks, at the
  size of weft's gradient buckets: the bus bandwidth the model needs, of
  the blocking all-reduce (the model's figure) and of the trainer's own
  call (non-blocking all-reduce + wait, SUM); at the end once more with
  --gap-ms = the DDP runs' median forward+backward, each call after that
  much computation on every rank, as in a training step (on this machine
  that halves the bandwidth: bench/README.md, "All-reduce").

Both peers get the same OPENBLAS_CORETYPE (weft would pick it by itself;
PyTorch would get Debian OpenBLAS's slow SSE kernels without it),
OMP_WAIT_POLICY=PASSIVE and OMP_NUM_THREADS = threads per rank.

It prints tokens/s (global tokens / median step time) for each config, the
weft/torch ratio, and the scaling efficiency (tokens/s at W = 2 / at W = 1:
both use the machine's 2 cores, so 1.0 means two single-threaded ranks do
as well as one process with two threads). Then the model of
docs/distributed.md: t_comm = 2 (W-1)/W x S / busbw + latency per bucket,
against the measured time per step in gradient communication:
- "after both arrived": per step, from the moment the later rank entered
  the gradient all-reduce to the moment the first left it (the trainer's
  "grad all-reduce" region, aligned across ranks by the traces' clocks;
  with ZeRO-1 the same over "grad reduce-scatter" plus "param
  all-gather"): the reduction itself, without waiting for the other rank;
- "blocked, least": per step, the smaller of the two ranks' time inside
  communication spans (the rank that arrived last waits least);
- "blocked, mean": both ranks' mean, waiting for the slower one included;
- comm_s: what the trainer itself records per step in metrics.jsonl (the
  time blocked in the gradient's collectives; every rank's with
  metrics.all_ranks), the mean of the ranks: the trainer's view of
  "blocked, mean".

--quick (the smoke test's): the tiny preset, a 512-id tokenizer on 12
chapters, 4 x 32 tokens, 10 steps, one round, no extra variants.
Only rank 0's numbers are reported; nothing is asserted.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEFT = ROOT / "build" / "weft"
AR_BENCH = ROOT / "build" / "bench" / "allreduce_bench"
CORPUS = ROOT / "data" / "corpus" / "austen"
LAUNCH = {"openmpi": ["mpirun.openmpi", "--oversubscribe", "--bind-to", "none"],
          "mpich": ["mpiexec.mpich"]}
MODEL_LINE = re.compile(r"model: (\d+) parameters \([^)]*\), dim (\d+), (\d+) layers, (\d+) heads "
                        r"\((\d+) kv\), ffn (\d+), vocab (\d+), (tied|untied)")
# the trainer's regions around its gradient (and, with ZeRO-1, parameter)
# communication, src/train/trainer.c
GRAD_REGIONS = ("grad all-reduce", "grad reduce-scatter", "param all-gather")
BUCKETS_LINE = re.compile(r"DDP: \d+ ranks \(\w+\), (\d+) gradient buckets? of up to ([0-9.]+) MB")


def load_avg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def blas_core():
    """The OpenBLAS kernels this CPU can run (weft picks the same itself)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    if " avx512f" in flags:
        return "SkylakeX"
    if " avx2" in flags:
        return "Haswell"
    return ""


def base_env(core, threads):
    env = dict(os.environ)
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    for k in list(env):
        if k.startswith(("OMPI_COMM_WORLD", "PMI_", "PMIX_", "SLURM_", "OMPI_MCA_")) or \
                k == "WEFT_DIST_BACKEND":
            del env[k]
    if core:
        env["OPENBLAS_CORETYPE"] = core
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["OMP_NUM_THREADS"] = str(threads)
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    return env


def run(cmd, env, timeout, what):
    """Runs cmd in its own process group, which is killed afterwards (no
    rank outlives the bench). Exits with the output when it fails."""
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        sys.exit(f"train_dist_bench: {what} did not finish in {timeout} s\n{out[-2000:]}\n{err[-3000:]}")
    finally:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if p.returncode != 0:
        sys.exit(f"train_dist_bench: {what} exited {p.returncode}: {' '.join(map(str, cmd))}\n"
                 f"{out[-2000:]}\n{err[-3000:]}")
    return out, err


# --- data ----------------------------------------------------------------

def make_dataset(d, quick):
    """A tokenizer and token shards of the Austen corpus in d."""
    files = sorted(CORPUS.glob("*.txt"))
    if not files:
        sys.exit(f"train_dist_bench: no corpus in {CORPUS} (scripts/setup.sh makes it)")
    if quick:
        files = sorted(CORPUS.glob("prideprejudice-*.txt"))[:12] or files[:12]
    vocab = 512 if quick else 8192
    env = dict(os.environ)
    run([WEFT, "tokenizer", "train", "--vocab-size", vocab, "--output", d / "tok.json"] + files, env,
        300, "weft tokenizer train")
    run([WEFT, "tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction",
         0.05, "--seed", 3] + files, env, 300, "weft tokenize")
    return d / "data", d / "tok.json"


# --- weft ----------------------------------------------------------------

def weft_train_options():
    """The options `weft train --help` lists (ZeRO-1 and per-rank metrics
    are newer than this bench's first version)."""
    out, _ = run([WEFT, "train", "--help"], dict(os.environ), 60, "weft train --help")
    return set(re.findall(r"--([a-z_]+\.[a-z_0-9]+)", out))


def weft_run(a, cfg, data, tok, run_dir, core):
    """One `weft train` run; returns its timed steps, model and trace figures."""
    W, threads = cfg["world"], cfg["threads"]
    timed = a.steps - a.warmup - 1
    args = ["train", "--data.dir", data, "--data.tokenizer", tok, "--train.run_dir", run_dir,
            "--no-resume", "--train.steps", a.steps, "--train.eval_every=0", "--train.log_every=1",
            "--ckpt.every=0", "--threads", threads, "--metrics.tensorboard=false",
            "--data.batch_size", a.batch, "--data.seq_len", a.seq,
            "--trace.requests=false", f"--trace.skip_first={a.warmup}", "--trace.warmup=0",
            f"--trace.active={timed + 1}"]
    if a.config:
        args = ["train", "--config", a.config] + args[1:]
    else:
        args += ["--preset", a.preset]
    if a.quick:
        args += ["--metrics.peak_tflops=1"]
    if a.bucket_mb:
        args += [f"--dist.bucket_mb={a.bucket_mb}"]
    if W > 1 and "metrics.all_ranks" in a.options:
        args += ["--metrics.all_ranks=true"]
    args += cfg.get("extra", [])
    env = base_env(core, threads)
    env.update(cfg.get("env", {}))
    cmd = [WEFT] + args
    if W > 1:
        cmd = LAUNCH[a.impl] + ["-np", str(W)] + cmd
    out, err = run(cmd, env, a.timeout, f"weft train at W = {W}")
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in recs if a.warmup < r["step"] < a.steps]
    if not steps:
        sys.exit(f"train_dist_bench: no timed steps in {run_dir / 'metrics.jsonl'}")
    m = MODEL_LINE.search(err)
    if not m:
        sys.exit(f"train_dist_bench: weft train did not log its model line\n{err[-2000:]}")
    P, C, L, H, KV, F, V, tied = m.groups()
    model = dict(params=int(P), dim=int(C), n_layers=int(L), n_heads=int(H), n_kv_heads=int(KV),
                 ffn_hidden_dim=int(F), vocab_size=int(V), tied=tied == "tied")
    b = BUCKETS_LINE.search(err)
    res = dict(step_s=[r["step_s"] for r in steps], tokens=steps[0]["tokens"],
               fwd_bwd_s=[r["fwd_bwd_s"] for r in steps], optim_s=[r["optim_s"] for r in steps],
               model=model, buckets=int(b.group(1)) if b else None,
               steps=[r["step"] for r in steps])
    if W > 1:
        res["comm"] = trace_comm(run_dir / "traces", set(res["steps"]))
        # the trainer's own figure, comm_s (every rank's, with metrics.all_ranks)
        files = [run_dir / "metrics.jsonl"] + sorted(run_dir.glob("ranks/rank-*/metrics.jsonl"))
        per = [{r["step"]: r["comm_s"] for r in map(json.loads, f.read_text().splitlines())
                if "comm_s" in r} for f in files]
        if all(per) and len(per) == W:
            res["comm_s"] = [[p.get(st) for p in per] for st in res["steps"] if all(st in p for p in per)]
    return res


def trace_comm(trace_dir, steps):
    """Per timed step, from every rank's trace: the time inside gradient
    communication spans (bucket waits, reduce-scatter, all-gather: spans of
    64 KiB or more, or waits on a non-blocking all-reduce) and inside small
    collectives (loss, agreement, norms); DDP's time inside MPI during the
    backward (starting buckets, "iall_reduce", and the progress tests,
    "progress": the trainer's comm_s leaves it out); and the intervals of
    the regions around the gradient communication (GRAD_REGIONS) on an
    absolute clock, DDP's starting where its last bucket started (inside
    the backward's last hook) if that is earlier."""
    caps = sorted(p for p in trace_dir.glob("step-*") if p.is_dir())
    ranks = {}
    for cap in caps:
        for f in sorted(cap.glob("rank-*.trace.json")):
            d = json.loads(f.read_text())
            r = d["distributedInfo"]["rank"]
            base = d["baseTimeNanoseconds"] / 1e3  # us
            ev = [e for e in d["traceEvents"] if e.get("ph") == "X" and e.get("pid") != 0]
            windows = {}
            for e in ev:
                if e["name"].startswith("ProfilerStep#"):
                    windows[int(e["name"][13:])] = (base + e["ts"], base + e["ts"] + e["dur"])
            per = ranks.setdefault(r, {})
            for s, (t0, t1) in windows.items():
                if s not in steps:
                    continue
                inside = [e for e in ev if t0 <= base + e["ts"] < t1]
                grad = small = inbwd = 0.0
                regions = []
                starts = []
                for e in inside:
                    args = e.get("args", {})
                    if e["cat"] == "cpu_op" and args.get("weft_cat") == "communication" and \
                            not args.get("nested"):
                        if e["name"] in ("iall_reduce", "progress"):
                            inbwd += e["dur"]
                            if e["name"] == "iall_reduce":
                                starts.append(base + e["ts"])
                        elif e["name"].startswith("wait") or args.get("bytes", 0) >= 65536:
                            grad += e["dur"]
                        else:
                            small += e["dur"]
                    if e["name"] in GRAD_REGIONS and e["cat"] == "user_annotation":
                        regions.append((base + e["ts"], base + e["ts"] + e["dur"]))
                regions.sort()
                if regions and starts:
                    before = [t for t in starts if t <= regions[0][0]]
                    if before:
                        regions[0] = (max(before), regions[0][1])
                per[s] = dict(grad=grad / 1e6, small=small / 1e6, inbwd=inbwd / 1e6, regions=regions)
    if len(ranks) < 2:
        return None
    common = sorted(set.intersection(*(set(v) for v in ranks.values())))
    rows = []
    for s in common:
        rs = [ranks[r][s] for r in sorted(ranks)]
        # the k-th region of every rank is the same collective (ranks issue
        # them in the same order)
        after = None
        if rs[0]["regions"] and all(len(x["regions"]) == len(rs[0]["regions"]) for x in rs):
            after = sum(max(0.0, min(x["regions"][k][1] for x in rs) - max(x["regions"][k][0] for x in rs))
                        for k in range(len(rs[0]["regions"]))) / 1e6
        rows.append(dict(step=s, grad=[x["grad"] for x in rs], small=[x["small"] for x in rs],
                         inbwd=[x["inbwd"] for x in rs], after=after))
    return rows


# --- PyTorch --------------------------------------------------------------

def torch_worker(a):
    """One rank of the PyTorch peer (started by torch_run with RANK etc. set)."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    sys.path.insert(0, str(ROOT / "bench"))
    import train_step_torch as tst

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    m = json.loads(a.torch_model)
    if not m["tied"]:
        sys.exit("train_dist_bench: the PyTorch peer builds tied models only (train_step_torch.Step)")
    tst.PRESETS["bench"] = {k: m[k] for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
                                              "ffn_hidden_dim")}
    st = tst.Step("bench", a.batch // world, a.seq)
    g = torch.Generator().manual_seed(1000 + rank)
    V = m["vocab_size"]
    st.tokens = torch.randint(0, V, (a.batch // world, a.seq), generator=g)
    st.targets = torch.randint(0, V, (a.batch // world, a.seq), generator=g)
    st.model = DDP(st.model, bucket_cap_mb=a.bucket_mb or 25)
    if a.torch_zero:
        from torch.distributed.optim import ZeroRedundancyOptimizer
        groups = st.opt.param_groups
        st.opt = ZeroRedundancyOptimizer(groups[0]["params"], optimizer_class=torch.optim.AdamW,
                                         lr=tst.LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        st.opt.add_param_group({"params": groups[1]["params"], "weight_decay": 0.0})
    dist.barrier()
    times = [st.step() for _ in range(a.steps)]
    if rank == 0:
        print("result " + json.dumps(dict(times=times, torch=torch.__version__,
                                          threads=torch.get_num_threads(),
                                          params=sum(p.numel() for p in st.params), loss=st.loss)),
              flush=True)
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    # gloo's teardown at exit sometimes aborts ("terminate called without an
    # active exception"); the work is done and reported, so leave at once
    os._exit(0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torch_run(a, cfg, model, core):
    """W ranks of torch_worker; returns rank 0's timed step times."""
    W, threads = cfg["world"], cfg["threads"]
    env = base_env(core, threads)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(W))
    procs = []
    cmd = [a.python, str(Path(__file__).resolve()), "--torch-worker", "--threads", str(threads),
           "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
           "--torch-model", json.dumps(model)]
    if a.bucket_mb:
        cmd += ["--bucket-mb", str(a.bucket_mb)]
    if cfg.get("zero1"):
        cmd += ["--torch-zero"]
    try:
        for r in range(W):
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                          start_new_session=True))
        deadline = time.monotonic() + a.timeout
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                sys.exit(f"train_dist_bench: the PyTorch peer at W = {W} did not finish in {a.timeout} s")
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            sys.exit(f"train_dist_bench: a PyTorch rank exited {p.returncode}\n{out[-2000:]}\n{err[-3000:]}")
    line = next((ln for ln in outs[0][0].splitlines() if ln.startswith("result ")), None)
    if not line:
        sys.exit(f"train_dist_bench: the PyTorch peer printed no result\n{outs[0][0][-2000:]}")
    r = json.loads(line[7:])
    r["step_s"] = r["times"][a.warmup:a.steps - 1]
    return r


# --- all-reduce bandwidth -------------------------------------------------

def allreduce_busbw(a, nbytes, core, gap_ms=0):
    """allreduce_bench at 2 ranks at nbytes: the blocking all-reduce's best and
    median time and busbw, memcpy's bandwidth, and the non-blocking SUM (the
    trainer's call) and AVG times, and ZeRO-1's reduce-scatter + all-gather,
    best batch; with gap_ms, each call after that much computation."""
    nbytes = max(4, nbytes // 4 * 4)
    gap = ["--gap-ms", f"{gap_ms:.1f}"] if gap_ms else []
    cmd = LAUNCH[a.impl] + ["-np", "2", AR_BENCH, "--min-bytes", nbytes, "--max-bytes", nbytes,
                            "--seconds", 0.2 if a.quick else 1.0, "--grad-mb", 1, "--bucket-mb", 1] + gap
    out, _ = run(cmd, base_env(core, 1), 120, "allreduce_bench")
    for line in out.splitlines():
        # bytes iters | best median algbw busbw | memcpy bus/memcpy | nb-sum nb-busbw nb/blk | nb-avg
        # | rs+ag rs+ag-busbw
        f = [x for x in line.split() if x != "|"]
        if len(f) == 14 and f[0] == str(nbytes):
            best, med, bus = float(f[2]), float(f[3]), float(f[5])
            return dict(bytes=nbytes, best_us=best, median_us=med, busbw=bus,
                        busbw_median=bus * best / med, memcpy=float(f[6]),
                        nb_sum_us=float(f[8]), nb_busbw=float(f[9]), nb_avg_us=float(f[11]),
                        rs_ag_us=float(f[12]), rs_ag_busbw=float(f[13]))
    sys.exit(f"train_dist_bench: no row for {nbytes} bytes in allreduce_bench's output\n{out}")


# --- report ---------------------------------------------------------------

def med(x):
    return statistics.median(x) if x else float("nan")


def fmt(x, spec):
    """x formatted by spec, or "-" of the same width when there is no number."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        width = re.match(r"\d*", spec).group(0)
        return "-".rjust(int(width) if width else 1)
    return format(x, spec)


def throughput_table(configs, res, tok, stat):
    """Prints and returns the throughput rows, tokens/s from stat (median or
    min) of each peer's step times."""
    print(f"{'config':34} {'W':>2} {'thr':>3} {'weft tok/s':>11} {'torch tok/s':>11} {'weft/torch':>10} "
          f"{'weft eff':>8} {'torch eff':>9}")
    base = {}
    rows = []
    for c in configs:
        w = res.get(("weft", c["name"]))
        t = res.get(("torch", c["name"]))
        wt = tok / stat(w["step_s"]) if w else None
        tt = tok / stat(t["step_s"]) if t else None
        if c["world"] == 1:
            base = dict(weft=wt, torch=tt)
        we = wt / base["weft"] if wt and base.get("weft") else None
        te = tt / base["torch"] if tt and base.get("torch") else None
        ratio = wt / tt if wt and tt else None
        rows.append(dict(config=c["name"], world=c["world"], threads=c["threads"], weft_tok_s=wt,
                         torch_tok_s=tt, weft_torch=ratio, weft_eff=we, torch_eff=te))
        print(f"{c['name']:34} {c['world']:2d} {c['threads']:3d} {fmt(wt, '11.0f')} {fmt(tt, '11.0f')} "
              f"{fmt(ratio, '9.2f')}{'x' if ratio else ' '} {fmt(we, '8.2f')} {fmt(te, '9.2f')}")
    return rows


def report(a, configs, res, ar, t0):
    tok = next(r["tokens"] for r in res.values() if "tokens" in r)
    print(f"\n== Data-parallel training: {a.label}, global batch {a.batch} x {a.seq} = {tok} tokens, "
          f"{a.steps} steps ({a.warmup} warm-up and the last left out), {a.rounds} round(s), "
          f"{a.impl}, load {a.load[0]:.2f} .. {max(a.load):.2f} ==")
    rows = throughput_table(configs, res, tok, med)
    print("(tok/s: global tokens / median step; eff: tok/s over W = 1's with the same peer; "
          "both use 2 cores)")
    print("\nthe same from each run's fastest step (what a quiet machine gives):")
    best = throughput_table(configs, res, tok, min)
    for r, b in zip(rows, best):
        r["best"] = b
    print(f"\n{'weft step split (median ms)':34} {'step':>8} {'best':>8} {'fwd+bwd':>8} "
          f"{'comm':>8} {'optim':>8} {'steps':>5}")
    for c in configs:
        w = res.get(("weft", c["name"]))
        if not w:
            continue
        comm = None
        if w.get("comm"):
            comm = med([statistics.mean(r["grad"]) + statistics.mean(r["small"]) for r in w["comm"]])
        ms = 1e3
        print(f"{c['name']:34} {med(w['step_s']) * ms:8.1f} {min(w['step_s']) * ms:8.1f} "
              f"{med(w['fwd_bwd_s']) * ms:8.1f} {fmt(comm * ms if comm is not None else None, '8.1f')} "
              f"{med(w['optim_s']) * ms:8.1f} {len(w['step_s']):5d}")
    print("(fwd+bwd includes the gradient communication; comm: mean of the ranks' time blocked in "
          "collectives, from the traces)")

    model = next(r["model"] for k, r in res.items() if k[0] == "weft")
    P = model["params"]
    S = 4 * P
    W = 2
    checks = []
    print(f"\n== Communication model (docs/distributed.md): P = {P} parameters, S = 4P = {S / 1e6:.2f} MB, "
          f"W = {W} ==")
    if ar:
        nb = ar["n_buckets"]
        pred = nb * 2 * (W - 1) / W * ar["bytes"] / (ar["busbw"] * 1e9)
        pred_med = nb * 2 * (W - 1) / W * ar["bytes"] / (ar["busbw_median"] * 1e9)
        print(f"allreduce_bench at {ar['bytes']} bytes ({nb} bucket(s) of S/{nb}): busbw {ar['busbw']:.2f} GB/s "
              f"best, {ar['busbw_median']:.2f} GB/s median (memcpy {ar['memcpy']:.1f} GB/s)")
        print(f"predicted t_comm = {nb} x 2(W-1)/W x {ar['bytes'] / 1e6:.2f} MB / busbw = {pred * 1e3:.2f} ms "
              f"(best busbw), {pred_med * 1e3:.2f} ms (median)")
        print(f"the trainer's call alone (non-blocking all-reduce + wait, SUM): {nb} x {ar['nb_sum_us'] / 1e3:.2f} ms "
              f"(busbw {ar['nb_busbw']:.2f} GB/s); with AVG (the library's average): "
              f"{nb} x {ar['nb_avg_us'] / 1e3:.2f} ms; ZeRO-1's reduce-scatter + all-gather of S: "
              f"{ar['rs_ag_us'] * nb / 1e3:.2f} ms (busbw {ar['rs_ag_busbw']:.2f} GB/s)")
        print(f"{'config':34} {'predicted':>9} {'after both':>10} {'ratio':>6} {'fastest':>7} "
              f"{'blk least':>9} {'blk mean':>8} {'comm_s':>6} {'small':>6}  (ms per step, medians over steps)")
        for c in configs:
            w = res.get(("weft", c["name"]))
            if not w or not w.get("comm"):
                continue
            rows_c = w["comm"]
            after = [r["after"] for r in rows_c if r["after"] is not None]
            after_m = med(after) if after else None
            after_min = min(after) if after else None
            least = med([min(r["grad"]) for r in rows_c])
            mean = med([statistics.mean(r["grad"]) for r in rows_c])
            small = med([statistics.mean(r["small"]) for r in rows_c])
            cs = med([statistics.mean(x) for x in w["comm_s"]]) if w.get("comm_s") else None
            meas = after_m if after_m is not None else least
            ratio = meas / pred if pred > 0 else None
            checks.append(dict(config=c["name"], predicted_s=pred, predicted_median_s=pred_med,
                               after_both_s=after_m, after_both_min_s=after_min, blocked_least_s=least, blocked_mean_s=mean, comm_s=cs,
                               small_s=small, ratio=ratio))
            print(f"{c['name']:34} {pred * 1e3:9.2f} {fmt(after_m * 1e3 if after_m is not None else None, '10.2f')} "
                  f"{fmt(ratio, '5.1f')}{'x' if ratio else ' '} "
                  f"{fmt(after_min * 1e3 if after_min is not None else None, '7.2f')} {least * 1e3:9.2f} {mean * 1e3:8.2f} "
                  f"{fmt(cs * 1e3 if cs is not None else None, '6.2f')} {small * 1e3:6.2f}")
        inb = [(c["name"], res[("weft", c["name"])]["comm"]) for c in configs
               if res.get(("weft", c["name"])) and res[("weft", c["name"])].get("comm")]
        inb = [(n, rows_c) for n, rows_c in inb if any(max(r.get("inbwd") or [0]) > 0 for r in rows_c)]
        if inb:
            print(f"{'inside MPI during the backward':34} {'later':>9} {'earlier':>9} {'later total':>11}  "
                  "(DDP: starting the bucket and the progress tests, ms per step, medians)")
            for name, rows_c in inb:
                # the later rank blocks least in the wait
                later = [r["inbwd"][r["grad"].index(min(r["grad"]))] for r in rows_c]
                earlier = [r["inbwd"][r["grad"].index(max(r["grad"]))] for r in rows_c]
                total = [r["inbwd"][r["grad"].index(min(r["grad"]))] + min(r["grad"]) for r in rows_c]
                print(f"{name:34} {med(later) * 1e3:9.2f} {med(earlier) * 1e3:9.2f} {med(total) * 1e3:11.2f}")
                for ck in checks:
                    if ck["config"] == name:
                        ck.update(inbwd_later_s=med(later), inbwd_earlier_s=med(earlier), later_total_s=med(total))
        print("(after both: from the later rank's entry into the gradient all-reduce (DDP: the start of its "
              "last bucket, inside the backward) to the first exit, median and fastest step; "
              "blk least/mean: time blocked in gradient collectives, the less waiting rank / both ranks; "
              "comm_s: the same as the trainer records it in metrics.jsonl, mean of the ranks; "
              "small: the loss and agreement all-reduces; ratio = measured / predicted)")
        g = ar.get("after_gap")
        if g:
            pg = nb * 2 * (W - 1) / W * g["bytes"] / (g["busbw"] * 1e9)
            print(f"\nthe same transfers timed after {ar['gap_ms']:.0f} ms of computation on every rank (a step's "
                  f"forward+backward; allreduce_bench --gap-ms): busbw {g['busbw']:.2f} GB/s, the trainer's call "
                  f"{nb} x {g['nb_sum_us'] / 1e3:.2f} ms, ZeRO-1's pair {g['rs_ag_us'] * nb / 1e3:.2f} ms")
            print(f"{'config':34} {'model':>9} {'call':>9} {'after both':>10} {'ratio':>6}  "
                  "(model: t_comm at that busbw; call: the config's own collectives timed alone after the "
                  "computation; ratio = after both / call)")
            for ck in checks:
                name = ck["config"]
                if "ZeRO-1" in name:
                    call = g["rs_ag_us"] * nb / 1e6
                elif name == "W=2, DDP":
                    call = nb * g["nb_sum_us"] / 1e6
                else:
                    call = None
                after_m = ck["after_both_s"]
                ratio = after_m / call if call and after_m is not None else None
                ck.update(predicted_after_gap_s=pg, call_after_gap_s=call)
                print(f"{name:34} {pg * 1e3:9.2f} {fmt(call * 1e3 if call else None, '9.2f')} "
                      f"{fmt(after_m * 1e3 if after_m is not None else None, '10.2f')} "
                      f"{fmt(ratio, '5.2f')}{'x' if ratio else ' '}")
    print(f"\n(total {time.time() - t0:.0f} s)")
    return dict(rows=rows, comm=checks, allreduce=ar, model=model)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="configs/austen-small.toml",
                    help="weft train config for the model and optimizer ('' to use --preset)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=8, help="global sequences per step")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--bucket-mb", type=float, default=0, help="dist.bucket_mb (0: weft's default, 25)")
    ap.add_argument("--impl", choices=sorted(LAUNCH), default="openmpi")
    ap.add_argument("--core", default=None, help="OPENBLAS_CORETYPE for both peers (default: from the CPU)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--quick", action="store_true", help="tiny model, few steps: the smoke test")
    ap.add_argument("--keep", help="keep the dataset and run folders here")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    ap.add_argument("--python", default=sys.executable)
    # the PyTorch peer's ranks
    ap.add_argument("--torch-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--torch-model", help=argparse.SUPPRESS)
    ap.add_argument("--torch-zero", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.torch_worker:
        torch_worker(a)
        return
    if a.quick:
        a.config, a.preset, a.batch, a.seq, a.steps, a.warmup, a.rounds = "", "tiny", 4, 32, 10, 2, 1
        a.timeout = min(a.timeout, 120)
    if a.steps < a.warmup + 2:
        sys.exit("train_dist_bench: --steps must leave at least one timed step after --warmup and the last")
    if a.batch % 2:
        sys.exit("train_dist_bench: --batch must be even (2 ranks share it)")
    for exe in (WEFT, AR_BENCH):
        if not exe.exists():
            sys.exit(f"train_dist_bench: {exe} not found; run `make` and `make bench` first")
    if a.config and not (ROOT / a.config).exists() and not Path(a.config).exists():
        sys.exit(f"train_dist_bench: config {a.config} not found")
    if a.config and not Path(a.config).is_absolute():
        a.config = str(ROOT / a.config)
    a.label = Path(a.config).stem if a.config else f"preset {a.preset}"
    core = blas_core() if a.core is None else a.core
    t0 = time.time()

    a.options = weft_train_options()
    zero1 = "dist.zero1" if "dist.zero1" in a.options else None
    configs = [dict(name="W=1, one process", world=1, threads=2),
               dict(name="W=2, DDP", world=2, threads=1)]
    if a.impl == "openmpi" and not a.quick:
        # weft's default is libnbc's ring; 0 is libnbc's own choice
        configs.append(dict(name="W=2, DDP, libnbc default", world=2, threads=1, torch=False,
                            env=dict(OMPI_MCA_coll_libnbc_iallreduce_algorithm="0")))
    if zero1:
        configs.append(dict(name="W=2, ZeRO-1", world=2, threads=1, zero1=True,
                            extra=[f"--{zero1}=true"]))
    print(f"train_dist_bench: {len(configs)} weft configs{'' if zero1 else ' (no zero1 option in weft train)'}, "
          f"OPENBLAS_CORETYPE={core or 'unset'}, load {load_avg():.2f}", flush=True)

    tmp = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="weft-dist-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    a.load = [load_avg()]
    try:
        data, tok = make_dataset(tmp, a.quick)
        res = {}
        ar = None
        model = None
        for rnd in range(a.rounds):
            order = configs if rnd % 2 == 0 else configs[::-1]
            for c in order:
                # weft first in even rounds (the first gives the model's
                # sizes to PyTorch), PyTorch first in odd ones
                peers = ["weft"]
                if not a.no_torch and c.get("torch", True):
                    peers = ["weft", "torch"] if rnd % 2 == 0 or not model else ["torch", "weft"]
                line = []
                for peer in peers:
                    if peer == "weft":
                        run_dir = tmp / f"run-{len(res)}-{rnd}"
                        w = weft_run(a, c, data, tok, run_dir, core)
                        if not a.keep:
                            shutil.rmtree(run_dir, ignore_errors=True)
                        model = w["model"]
                        acc = res.setdefault(("weft", c["name"]),
                                             dict(w, step_s=[], fwd_bwd_s=[], optim_s=[], comm=[], rounds=[],
                                                  comm_s=[]))
                        for k in ("step_s", "fwd_bwd_s", "optim_s"):
                            acc[k] += w[k]
                        acc["comm_s"] += w.get("comm_s") or []
                        acc["comm"] += w.get("comm") or []
                        acc["rounds"].append(med(w["step_s"]))
                    else:
                        t = torch_run(a, c, model, core)
                        acc = res.setdefault(("torch", c["name"]), dict(t, step_s=[], rounds=[]))
                        acc["step_s"] += t["step_s"]
                        acc["rounds"].append(med(t["step_s"]))
                        if t["params"] != model["params"]:
                            print(f"  note: PyTorch's model has {t['params']} parameters, weft's "
                                  f"{model['params']}", flush=True)
                    line.append(f"{peer} {acc['rounds'][-1] * 1e3:.1f} ms")
                a.load.append(load_avg())
                print(f"  round {rnd + 1}: {c['name']}: median step {', '.join(line)} "
                      f"(load {a.load[-1]:.2f})", flush=True)
            # the bus bandwidth at the bucket size, twice per round (the best
            # kept: on a shared machine a slow probe leaves few samples)
            w2 = res[("weft", "W=2, DDP")]
            nb = w2.get("buckets") or 1
            for _ in range(2):
                r = allreduce_busbw(a, 4 * w2["model"]["params"] // nb, core)
                r["n_buckets"] = nb
                if ar is None or r["busbw"] > ar["busbw"]:
                    ar = r
        if ar:
            # once more, each call after as long a computation as a step's
            # forward and backward (W = 2, DDP): on this machine that halves
            # the bandwidth of the transfer that follows
            ar["gap_ms"] = med(res[("weft", "W=2, DDP")]["fwd_bwd_s"]) * 1e3
            ar["after_gap"] = allreduce_busbw(a, ar["bytes"], core, ar["gap_ms"])
        summary = report(a, configs, res, ar, t0)
        if a.json:
            Path(a.json).write_text(json.dumps(dict(args={k: v for k, v in vars(a).items() if k != "options"},
                                                    summary=summary,
                                                    raw={f"{k[0]} {k[1]}": v for k, v in res.items()}),
                                               indent=1))
    finally:
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
