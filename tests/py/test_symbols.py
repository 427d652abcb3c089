"""The library's exported symbols: one meaning for "private".

Every symbol libweft.a exports (a function or object visible to the
linker) starts with wf_. Public ones, wf_<module>_<verb>, are declared in
include/weft/; the ones a module's files share, wf__<module>_<verb>, are
declared only in that module's src/<layer>/*_impl.h (libuv's uv__
convention). Anything else is static. See docs/architecture.md.
"""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def exported(lib):
    """(symbol, object file) for every defined global symbol of the archive."""
    out = subprocess.run(["nm", "-g", "--defined-only", "-A", str(lib)], capture_output=True, text=True,
                         check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        where, _kind, name = parts
        syms.append((name, where.rsplit(":", 1)[0].split(":")[-1]))
    return syms


def problems(syms, public_text, impl_text):
    words_public = set(re.findall(r"\bwf_\w+", public_text))
    words_impl = set(re.findall(r"\bwf__\w+", impl_text))
    bad = []
    for name, obj in syms:
        if name.startswith("wf__"):
            if name in words_public:
                bad.append(f"{name} ({obj}) is internal (wf__) but declared in include/weft/")
            elif name not in words_impl:
                bad.append(f"{name} ({obj}) is internal (wf__) but declared in no src/*/*_impl.h")
        elif name.startswith("wf_"):
            if name not in words_public:
                bad.append(f"{name} ({obj}) is not declared in include/weft/: name it wf__<module>_... in the "
                           "module's *_impl.h, or make it static")
        else:
            bad.append(f"{name} ({obj}) does not start with wf_: make it static or give it a wf_/wf__ name")
    return bad


def read_all(paths):
    return "\n".join(p.read_text(errors="replace") for p in paths)


def test_every_exported_symbol_is_prefixed_and_declared(build_dir):
    lib = build_dir / "libweft.a"
    if not lib.exists():
        pytest.fail(f"{lib} is missing: run `make` first")
    if not shutil.which("nm"):
        pytest.fail("nm (binutils) is missing; scripts/setup.sh installs it")
    public = read_all(sorted((ROOT / "include" / "weft").glob("*.h")))
    impl = read_all(sorted((ROOT / "src").glob("*/*.h")))
    bad = problems(exported(lib), public, impl)
    assert not bad, f"{len(bad)} exported symbols break the naming rule:\n" + "\n".join(bad)


def test_the_check_catches_each_kind():
    syms = [("wf_ok", "a.o"), ("wf__mod_shared", "b.o"), ("prep_thing", "c.o"), ("wf_hidden", "d.o"),
            ("wf__leaked", "e.o"), ("wf__nowhere", "f.o")]
    bad = problems(syms, "void wf_ok(void); void wf__leaked(void);", "void wf__mod_shared(void);")
    assert len(bad) == 4, bad
    assert any(b.startswith("prep_thing") for b in bad)
    assert any(b.startswith("wf_hidden") for b in bad)
    assert any(b.startswith("wf__leaked") for b in bad)
    assert any(b.startswith("wf__nowhere") for b in bad)
