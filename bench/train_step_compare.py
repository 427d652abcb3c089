"""weft's whole training step against PyTorch's, interleaved in one run,
with MFU against the sgemm peak measured in the same run.

    .venv/bin/python bench/train_step_compare.py [--preset stories15M]
        [--batch 8] [--seq 256] [--threads 2] [--rounds 6] [--steps 2]
        [--warmup 1] [--core SkylakeX[,Haswell]] [--wait PASSIVE]
        [--also-default] [--json FILE]

What it does, per OpenBLAS core type (--core; Debian's OpenBLAS 0.3.21
picks its SSE "Prescott" kernels on this CPU unless OPENBLAS_CORETYPE says
otherwise, so both peers get the same one, set before they start):
  - starts both peers and keeps them alive: build/bench/train_step_bench
    --serve (weft) and bench/train_step_torch.py --serve (PyTorch), both
    with OMP_WAIT_POLICY=PASSIVE (--wait): on a machine shared with other
    jobs, OpenMP threads that spin at barriers while their partner is
    descheduled make either peer many times slower; each peer waits on its
    stdin while another runs, so they never run at the same time;
  - measures the sgemm peak MAMF-style (the best GFLOP/s over large
    squares and every product of the step, in the model's layouts), at the
    start and at the end, with cblas_sgemm in the weft process and torch.mm
    in the torch one (same OpenBLAS): the peak is the best of all of them;
  - after --warmup steps each, runs --rounds rounds of --steps whole steps
    (zero_grad, forward with loss, backward, clip to norm 1.0, AdamW) of
    weft, then of torch (the order alternates each round), and prints per
    round and the median step, tokens/s, the ratio of tokens/s weft/torch,
    and each one's MFU: (6 N_mm + 6 L T C) FLOPs per token (docs/train.md)
    x tokens/s / peak;
  - with --also-default, two more peers: weft and torch with
    OMP_WAIT_POLICY unset;
  - with --compile-python PY, one more peer: the current PyTorch of that
    interpreter (a benchmark-only venv, bench/torch_venv.sh) with the model
    under torch.compile and AdamW(fused=True), compiled in its warm-up
    steps; it brings its own BLAS (the wheel's), not Debian's OpenBLAS;
  - prints weft's time per op and both peers' phases (median round).

The machine's load average (/proc/loadavg) is printed with every round:
on a shared machine the ratio, measured in alternation, is the figure to
trust; absolute times move with the load. Not a test: asserts nothing.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_avg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


class Peer:
    """A --serve process: one command line in, one JSON line out."""

    def __init__(self, name, argv, env):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True, bufsize=1, cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.close()
            sys.exit(f"train_step_compare: {name} did not start (got {line!r})")
        self.info = json.loads(line[len("ready "):])

    def ask(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"train_step_compare: {self.name} exited on {cmd!r}")
        out = json.loads(line)
        if "error" in out:
            sys.exit(f"train_step_compare: {self.name}: {out['error']}")
        return out

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def start_peers(a, core):
    """weft and torch with OMP_WAIT_POLICY=--wait; with --also-default,
    weft-default and torch-default with the variable unset (libgomp's
    default: spin a while, then sleep)."""
    common = ["--preset", a.preset, "--batch", str(a.batch), "--seq", str(a.seq),
              "--threads", str(a.threads), "--serve"]
    base = dict(os.environ, OPENBLAS_CORETYPE=core)
    base.pop("OMP_WAIT_POLICY", None)
    waited = dict(base, OMP_WAIT_POLICY=a.wait) if a.wait else base
    weft_argv = [str(ROOT / a.bin)] + common
    torch_argv = [a.python, str(ROOT / "bench" / "train_step_torch.py")] + common
    peers = [Peer("weft", weft_argv, waited), Peer("torch", torch_argv, waited)]
    if a.compile_python:
        # the current PyTorch (a benchmark-only venv: bench/torch_venv.sh),
        # its model compiled by inductor and AdamW fused; its own BLAS
        compiled_argv = [a.compile_python, str(ROOT / "bench" / "train_step_torch.py")] + common
        peers.append(Peer("torch.compile", compiled_argv + ["--compile", "--fused"], waited))
    if a.also_default:
        peers += [Peer("weft-default", weft_argv, base), Peer("torch-default", torch_argv, base)]
    return peers


def measure_peak(peers, tables=None):
    """{peer: (GFLOP/s, best shape)} from weft's cblas_sgemm and torch's
    torch.mm over the same shapes; every shape's rate goes into `tables`."""
    got = {}
    for p in peers[:2]:
        r = p.ask("peak")
        best = max(r["shapes"], key=lambda s: s["gflops"])
        got[p.name] = (r["peak"], best["mnk"])
        if tables is not None:
            tables.append(dict(peer=p.name, load=load_avg(), shapes=r["shapes"]))
    return got


def run_core(a, core):
    print(f"\n=== OPENBLAS_CORETYPE={core}: {a.preset}, B x T = {a.batch} x {a.seq}, "
          f"{a.threads} threads (load {load_avg():.2f}) ===")
    peers = start_peers(a, core)
    try:
        return compare(a, core, peers)
    finally:
        for p in peers:
            p.close()


def compare(a, core, peers):
    weft = peers[0]
    info = weft.info
    if info["blas_core"] != core:
        print(f"  note: OpenBLAS runs its {info['blas_core']} kernels (asked for {core})")
    fpt = info["flops_per_token"]
    tok = a.batch * a.seq
    print(f"  weft: {info['params']} parameters, OpenBLAS {info['blas_core']} kernels; "
          f"torch {peers[1].info['torch']}, {peers[1].info['threads']} threads; "
          f"{fpt * tok / 1e9:.1f} GFLOP per step ({fpt / 1e6:.2f} MFLOP/token)")

    tables = []
    peaks = measure_peak(peers, tables)
    for name, (g, mnk) in peaks.items():
        print(f"  sgemm peak at start, {name}: {g:.1f} GFLOP/s (best shape {mnk})")

    for p in peers:
        p.ask(f"run {max(a.warmup, a.compile_warmup) if p.name == 'torch.compile' else a.warmup}")
    if a.warmup:
        weft.ask("ops")  # drop the warm-up's op times

    flops = fpt * tok  # per step
    times = {p.name: [] for p in peers}
    rounds = []
    names = [p.name for p in peers]
    for r in range(a.rounds):
        order = peers if r % 2 == 0 else peers[::-1]
        res = {}
        l0 = load_avg()
        for p in order:
            res[p.name] = p.ask(f"run {a.steps}")
            times[p.name] += res[p.name]["times"]
        l1 = load_avg()
        mean = {n: statistics.mean(res[n]["times"]) for n in names}
        rounds.append(dict(load=(l0 + l1) / 2, res=res, mean=mean))
        print(f"  round {r + 1} of {a.rounds} done", flush=True)

    peaks_end = measure_peak(peers, tables)
    for name, (g, mnk) in peaks_end.items():
        print(f"  sgemm peak at end,   {name}: {g:.1f} GFLOP/s (best shape {mnk})")
    peak = max(g for g, _ in list(peaks.values()) + list(peaks_end.values()))

    print("\n  per round: s/step (MFU against the best peak), weft/torch tokens/s")
    print("  round  load  " + "  ".join(f"{n:>19}" for n in names) + "  weft/torch")
    for r, rd in enumerate(rounds):
        mean = rd["mean"]
        print(f"  {r + 1:5d} {rd['load']:5.2f}  " +
              "  ".join(f"{mean[n]:11.3f} ({100 * flops / mean[n] / 1e9 / peak:3.0f}%)"
                        for n in names) +
              f"  {mean['torch'] / mean['weft']:9.2f}x")

    med = {n: statistics.median(times[n]) for n in names}
    ratios = [rd["mean"]["torch"] / rd["mean"]["weft"] for rd in rounds]
    print(f"\n  sgemm peak (best of all): {peak:.1f} GFLOP/s")
    print(f"  {'peer':13} {'median s/step':>13} {'best':>7} {'tokens/s':>9} {'MFU':>6} "
          f"{'best MFU':>8} {'CPU s/step':>10} {'zero':>6} {'fwd':>7} {'bwd':>7} {'clip+opt':>8}")
    summary = dict(core=core, peak=peak, peaks_start=peaks, peak_tables=tables,
                   peaks_end=peaks_end, flops_per_token=fpt, tokens_per_step=tok, peers={})
    for n in names:
        steps = sum(len(rd["res"][n]["times"]) for rd in rounds)
        ph = {k: sum(rd["res"][n][k] for rd in rounds) / steps * 1e3
              for k in ("zero", "fwd", "bwd", "opt")}
        # CPU seconds per step per thread: the step's time with the other
        # jobs' share of the cores taken out (idle waits do not count)
        cpu = sum(rd["res"][n]["cpu"] for rd in rounds) / steps / a.threads
        mfu = flops / med[n] / 1e9 / peak
        mfu_best = flops / min(times[n]) / 1e9 / peak
        print(f"  {n:13} {med[n]:13.3f} {min(times[n]):7.3f} {tok / med[n]:9.0f} "
              f"{100 * mfu:5.1f}% {100 * mfu_best:7.1f}% {cpu:10.3f} {ph['zero']:6.1f} "
              f"{ph['fwd']:7.1f} {ph['bwd']:7.1f} {ph['opt']:8.1f}")
        summary["peers"][n] = dict(median=med[n], best=min(times[n]), tokens_per_s=tok / med[n],
                                   mfu=mfu, mfu_best=mfu_best, cpu_per_step=cpu, phases_ms=ph,
                                   times=times[n], loss=rounds[-1]["res"][n]["loss"])
    print("  (MFU: the median step's FLOP rate against the peak; best MFU: the fastest "
          "step's; CPU s/step: CPU time per thread; phases: ms/step, mean of all rounds)")
    print(f"  weft/torch tokens/s: {med['torch'] / med['weft']:.2f}x (median steps); "
          f"per round {min(ratios):.2f}x .. {max(ratios):.2f}x, median "
          f"{statistics.median(ratios):.2f}x; by CPU time "
          f"{summary['peers']['torch']['cpu_per_step'] / summary['peers']['weft']['cpu_per_step']:.2f}x")
    if "torch.compile" in med:
        cr = [rd["mean"]["torch.compile"] / rd["mean"]["weft"] for rd in rounds]
        print(f"  weft/torch.compile tokens/s ({peers[2].info['torch']}): "
              f"{med['torch.compile'] / med['weft']:.2f}x (median steps); per round "
              f"{min(cr):.2f}x .. {max(cr):.2f}x; by CPU time "
              f"{summary['peers']['torch.compile']['cpu_per_step'] / summary['peers']['weft']['cpu_per_step']:.2f}x")
    if "torch-default" in med:
        print(f"  with OMP_WAIT_POLICY unset, weft/torch tokens/s: "
              f"{med['torch-default'] / med['weft-default']:.2f}x; {a.wait or 'unset'} against "
              f"unset: weft {med['weft-default'] / med['weft']:.2f}x, torch "
              f"{med['torch-default'] / med['torch']:.2f}x faster")
    loads = [rd["load"] for rd in rounds]
    print(f"  load average during the rounds: {min(loads):.2f} .. {max(loads):.2f}")

    ops = weft.ask("ops")
    nstep = ops["steps"]
    op_tot = {k: (ops["fwd"][k] + ops["bwd"][k]) / nstep for k in ops["fwd"]}
    wmean = sum(statistics.mean(rd["res"]["weft"]["times"]) for rd in rounds) / len(rounds)
    wph = summary["peers"]["weft"]["phases_ms"]
    rows = [(k, ops["fwd"][k] / nstep, ops["bwd"][k] / nstep) for k in ops["fwd"]]
    rows.append(("zero_grad", wph["zero"] / 1e3, 0.0))
    rows.append(("clip+AdamW", wph["opt"] / 1e3, 0.0))
    accounted = sum(f + b for _, f, b in rows)
    print(f"\n  weft per step, by op (mean over {nstep} steps; step mean {wmean * 1e3:.0f} ms, "
          f"ops account for {accounted * 1e3:.0f} ms):")
    print(f"    {'op':14} {'forward':>9} {'backward':>9} {'share':>7}")
    for k, f, b in sorted(rows, key=lambda x: -(x[1] + x[2])):
        print(f"    {k:14} {f * 1e3:7.1f}ms {b * 1e3:7.1f}ms {100 * (f + b) / accounted:6.1f}%")
    mm_flops = info["matmul_flops_per_token"] * tok
    mm_t = op_tot["matmul"]
    print(f"    matmuls: {mm_flops / mm_t / 1e9:.1f} GFLOP/s = "
          f"{100 * mm_flops / mm_t / 1e9 / peak:.0f}% of the peak; "
          f"threads in weft's process: {ops['threads']}")
    summary["weft_ops"] = ops
    return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="stories15M")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=2, help="steps per peer per round")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--core", default="SkylakeX",
                    help="OPENBLAS_CORETYPE values, comma-separated (Haswell is AVX2)")
    ap.add_argument("--wait", default="PASSIVE",
                    help="OMP_WAIT_POLICY for both peers ('' leaves it unset)")
    ap.add_argument("--also-default", action="store_true",
                    help="also run both peers with OMP_WAIT_POLICY unset")
    ap.add_argument("--bin", default="build/bench/train_step_bench")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--compile-python",
                    help="an interpreter with the current PyTorch (bench/torch_venv.sh): adds the peer "
                         "torch.compile (inductor, fused AdamW), warmed up (compiled) before the rounds")
    ap.add_argument("--compile-warmup", type=int, default=3,
                    help="warm-up steps of the torch.compile peer (its first steps compile)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    if not (ROOT / a.bin).exists():
        sys.exit(f"train_step_compare: {a.bin} not found; run `make bench` first")
    t0 = time.time()
    results = [run_core(a, core) for core in a.core.split(",")]
    print(f"\n(total {time.time() - t0:.0f} s)")
    if a.json:
        Path(a.json).write_text(json.dumps(dict(args=vars(a), results=results), indent=1))


if __name__ == "__main__":
    main()
