"""How the weft Python package is built from the weft checkout it sits in.

Used by setup.py (the build), scripts/setup.sh (is the package in .venv
built from these sources?) and tests/py/conftest.py (the same check, so
that the tests never run an extension built from other sources).

    python python/weft_build.py --hash     prints the sources' hash

The extension links build-pic/libweft.a, the library compiled as
position-independent code by `make pic` (the main build, build/libweft.a,
is not), with the libraries `make pic-link-flags` prints.
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The extension's sources and warning flags (the library's set, less
# -Wwrite-strings: Python 3.11's keyword lists are `char *[]`).
# tests/py/test_python_build.py compiles them with -Werror under gcc and clang.
EXT_SOURCES = ["csrc/pyweft_module.c", "csrc/pyweft_data.c", "csrc/pyweft_loader.c", "csrc/pyweft_tok.c",
               "csrc/pyweft_ckpt.c"]
EXT_CFLAGS = ["-std=c11", "-fvisibility=hidden", "-Wall", "-Wextra", "-Wno-unused-parameter",
              "-Wno-missing-field-initializers", "-Wshadow", "-Wvla", "-Wstrict-prototypes", "-Wmissing-prototypes",
              "-Wpointer-arith", "-Wformat=2", "-Wundef", "-Wcast-align"]


def root():
    """The weft checkout: WEFT_ROOT if set, else the folder above python/."""
    r = Path(os.environ.get("WEFT_ROOT") or HERE.parent).resolve()
    if not (r / "include" / "weft" / "weft.h").is_file() or not (r / "Makefile").is_file():
        raise SystemExit(f"{r} is not a weft checkout (no include/weft/weft.h and Makefile): the weft package "
                         "builds from the checkout it sits in (python/ of weft), or from WEFT_ROOT")
    return r


def sources(r):
    """Every file the package is built from: the library's sources, the
    public headers, the Makefile and the package itself."""
    files = [r / "Makefile"]
    files += sorted((r / "include" / "weft").glob("*.h"))
    files += sorted(p for p in (r / "src").rglob("*") if p.suffix in (".c", ".h"))
    files += sorted(p for p in (r / "python").rglob("*")
                    if p.is_file() and p.suffix in (".c", ".h", ".py", ".toml")
                    and not any(part in ("build", "__pycache__") or part.endswith(".egg-info")
                                for part in p.relative_to(r / "python").parts))
    return files


def source_hash(r=None):
    """SHA-256 (first 16 hex digits) over the sources' paths and bytes."""
    r = r or root()
    h = hashlib.sha256()
    for p in sources(r):
        h.update(str(p.relative_to(r)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def version(r):
    """WF_VERSION from include/weft/weft.h."""
    for line in (r / "include" / "weft" / "weft.h").read_text().splitlines():
        if line.startswith("#define WF_VERSION"):
            return line.split('"')[1]
    raise SystemExit(f"{r}/include/weft/weft.h has no WF_VERSION")


def build_library(r):
    """Runs `make pic` (incremental) and returns build-pic/libweft.a."""
    jobs = str(os.cpu_count() or 1)
    subprocess.run(["make", "-C", str(r), "-j", jobs, "--no-print-directory", "pic"], check=True)
    lib = r / "build-pic" / "libweft.a"
    if not lib.is_file():
        raise SystemExit(f"`make pic` did not make {lib}")
    return lib


def link_flags(r):
    """What linking libweft.a into a shared object needs (-fopenmp, -l...)."""
    out = subprocess.run(["make", "-s", "-C", str(r), "--no-print-directory", "pic-link-flags"], check=True,
                         capture_output=True, text=True).stdout
    return out.split()


if __name__ == "__main__":
    if sys.argv[1:] == ["--hash"]:
        print(source_hash())
    else:
        raise SystemExit("usage: python weft_build.py --hash")
