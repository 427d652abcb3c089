"""Turns translated manual pages (troff, gzip) into plain text, one file per
language, for the tokenizer's multilingual tests. Crude on purpose: drop
requests and comments, strip font escapes; the result only has to be real
text in that language, not a faithful rendering."""
import gzip
import re
import sys
from pathlib import Path

src, dst = Path(sys.argv[1]), Path(sys.argv[2])
ESC = re.compile(r"\\f[BIRP]|\\f\(..|\\\(..|\\[&|^e-]|\\s[-+]?\d")
for lang_dir in sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith("man")):
    out = []
    size = 0
    for page in sorted(lang_dir.glob("man*/*.gz")):
        try:
            text = gzip.decompress(page.read_bytes()).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            if line.startswith((".", "'")):
                continue
            line = ESC.sub("", line).strip()
            if line:
                out.append(line)
                size += len(line.encode())
        if size > 400_000:
            break
    if out:
        (dst / f"{lang_dir.name}.txt").write_text("\n".join(out) + "\n", encoding="utf-8")
