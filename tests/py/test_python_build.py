"""The Python package's C extension (python/csrc/) compiles without a
warning under gcc and clang with its flags (python/weft_build.py) and
-Werror, as the library does in CI; `pip install ./python` compiles it with
the same flags but does not stop on a warning."""
import shutil
import subprocess
import sysconfig

import pytest

from conftest import ROOT, _weft_build


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_extension_compiles_without_warnings(cc, tmp_path):
    if not shutil.which(cc):
        pytest.fail(f"{cc} is missing: run scripts/setup.sh")
    wb = _weft_build()
    for src in wb.EXT_SOURCES:
        p = subprocess.run([cc] + wb.EXT_CFLAGS + ["-Werror", "-fPIC", "-I", str(ROOT / "include"), "-I",
                            sysconfig.get_paths()["include"], "-c", str(ROOT / "python" / src), "-o",
                            str(tmp_path / "x.o")], capture_output=True, text=True)
        assert p.returncode == 0, f"{cc} {src}:\n{p.stderr[-3000:]}"
