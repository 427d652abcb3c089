"""The peer of bench/trace_bench.c: what a span costs in PyTorch's profiler
(torch.profiler.record_function, the annotation a training loop wraps its
ops in), with no profiler running and with one recording CPU activity.
Times are the CPU time of this thread (time.thread_time_ns), as in the C
bench. Prints ns per span; asserts nothing.

    .venv/bin/python bench/trace_bench.py [--spans N]
"""
import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile, record_function


def per_span(n):
    t0 = time.thread_time_ns()
    for _ in range(n):
        with record_function("op"):
            pass
    return (time.thread_time_ns() - t0) / n


def empty_loop(n):
    t0 = time.thread_time_ns()
    for _ in range(n):
        pass
    return (time.thread_time_ns() - t0) / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spans", type=int, default=200000)
    n = ap.parse_args().spans
    loop = empty_loop(n)
    off = per_span(n)
    with profile(activities=[ProfilerActivity.CPU]):
        on = per_span(n)
    print(f"torch {torch.__version__}, {n} spans (record_function enter + exit), Python loop subtracted:")
    print(f"  no profiler running      {off - loop:10.1f} ns")
    print(f"  profiler recording       {on - loop:10.1f} ns")


if __name__ == "__main__":
    main()
