"""Builds the weft package's C extension against the weft checkout this
folder belongs to (weft_build.py says how); the metadata is in
pyproject.toml. `pip install ./python` from the checkout's root."""
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

sys.path.insert(0, str(Path(__file__).resolve().parent))
import weft_build  # noqa: E402

ROOT = weft_build.root()


class BuildExt(build_ext):
    """Makes build-pic/libweft.a first, then links it into weft._weft
    (its symbols kept out of the extension's dynamic symbol table)."""

    def build_extensions(self):
        lib = weft_build.build_library(ROOT)
        flags = weft_build.link_flags(ROOT)
        for ext in self.extensions:
            ext.extra_objects = [str(lib)]
            ext.extra_link_args = ["-Wl,--exclude-libs,ALL"] + flags
        self.force = True  # the library may have changed under an unchanged extension
        super().build_extensions()


class BuildPy(build_py):
    """Records which sources the package was built from (weft._build)."""

    def run(self):
        super().run()
        out = Path(self.build_lib) / "weft" / "_build.py"
        out.write_text('"""Written by setup.py: the sources this package was built from."""\n'
                       f"SOURCE_HASH = {weft_build.source_hash(ROOT)!r}\nSOURCE_DIR = {str(ROOT)!r}\n")


setup(
    version=weft_build.version(ROOT),
    ext_modules=[Extension(
        "weft._weft",
        sources=weft_build.EXT_SOURCES,
        depends=["csrc/pyweft.h"],
        include_dirs=[str(ROOT / "include")],
        extra_compile_args=weft_build.EXT_CFLAGS,
    )],
    cmdclass={"build_ext": BuildExt, "build_py": BuildPy},
)
