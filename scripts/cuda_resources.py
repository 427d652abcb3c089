#!/usr/bin/env python3
"""The resource table of the CUDA kernels from ptxas's -v report (stdin):
one line per kernel and architecture with its registers, barriers, static
shared memory, stack frame and spills, sorted. `make cuda` writes it to
build/cuda-resources.txt; src/cuda/resources.txt is the committed copy
that tests/py/test_cudaemu.py compares it with (docs/gpu.md, "Resources").
A change in a kernel that changes a figure shows in review as a change of
that file."""
import re
import sys

ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:, used (\d+) barriers)?(?:, (\d+) bytes smem)?")


def demangle(name):
    """The kernel's name, with its template argument: _Z15attention_fwd_kIfEv...
    is attention_fwd_k<float>, ...I7wf_bf16E... attention_fwd_k<wf_bf16>."""
    m = re.match(r"_Z(\d+)(\w+)", name)
    if not m:
        return name
    n = int(m.group(1))
    base, rest = m.group(2)[:n], m.group(2)[n:]
    t = re.match(r"I(?:(\d+)(\w+)|([a-z]))E", rest)
    if not t:
        return base
    arg = t.group(2)[: int(t.group(1))] if t.group(1) else {"f": "float", "i": "int"}.get(t.group(3), t.group(3))
    return f"{base}<{arg}>"


def main():
    rows, cur = {}, None
    for line in sys.stdin:
        if m := ENTRY.search(line):
            cur = (demangle(m.group(1)), m.group(2))
            rows[cur] = {"stack": 0, "spill_st": 0, "spill_ld": 0, "regs": 0, "barriers": 0, "smem": 0}
        elif cur and (m := PROPS.search(line)):
            rows[cur].update(stack=int(m.group(1)), spill_st=int(m.group(2)), spill_ld=int(m.group(3)))
        elif cur and (m := USED.search(line)):
            rows[cur].update(regs=int(m.group(1)), barriers=int(m.group(2) or 0), smem=int(m.group(3) or 0))
    if not rows:
        sys.exit("cuda_resources.py: no 'Compiling entry function' line in the input (was -Xptxas -v given?)")
    print("# kernel arch registers barriers static_smem stack spill_stores spill_loads")
    for (k, arch), r in sorted(rows.items()):
        print(f"{k} {arch} {r['regs']} {r['barriers']} {r['smem']} {r['stack']} {r['spill_st']} {r['spill_ld']}")


if __name__ == "__main__":
    main()
