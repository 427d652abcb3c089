"""The layering and the public boundary, checked against the code.

docs/architecture.md holds the one statement of the rule: a graph of which
layer may include which (the block after the `layer graph` marker) and the
layer each public header belongs to. This test reads that block, then every
`#include "..."` of src/, include/weft/ and tools/:

- a file of src/<layer>/ includes only its own layer's internal headers
  (src/<layer>/*.h) and public headers of the layers it may use;
- a public header includes only public headers of layers its own may use;
- tools/ includes only public headers (and its own commands.h), and so
  does the Python package's extension, python/csrc/ (and its pyweft.h);
- every public header and every src/ folder is placed in the graph.

The symbol check (every symbol libweft.a exports starts with wf_; the
module-internal ones with wf__ and are declared in no public header) is in
test_symbols.py.
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def parse_rule(text):
    """(deps, header_layer) from the doc's block: deps[layer] is the set of
    layers it may include (transitively closed); header_layer maps a public
    header's name (without .h) to its layer."""
    m = re.search(r"<!-- layer graph[^>]*-->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"{DOC}: no ```-block after a '<!-- layer graph -->' marker"
    direct, header_layer = {}, {}
    for raw in m.group(1).splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if ":" in line:  # layer: header header ...
            layer, heads = line.split(":", 1)
            for h in heads.split():
                assert h not in header_layer, f"header {h} is placed twice"
                header_layer[h] = layer.strip()
            direct.setdefault(layer.strip(), set())
            continue
        # "a, b ← c ← d": each group may include every group left of it.
        groups = [[x.strip() for x in g.split(",") if x.strip()] for g in line.split("←")]
        for i, g in enumerate(groups):
            for layer in g:
                s = direct.setdefault(layer, set())
                for left in groups[:i]:
                    s.update(left)
    deps = {}
    for layer in direct:
        seen, todo = set(), list(direct[layer])
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            todo.extend(direct.get(x, ()))
        assert layer not in seen, f"the layer graph has a cycle through {layer}"
        deps[layer] = seen
    return deps, header_layer


def violations(root, deps, header_layer):
    """Every include that breaks the rule, as readable lines."""
    out = []
    src_layers = sorted(p.name for p in (root / "src").iterdir() if p.is_dir())
    for layer in src_layers:
        if layer not in deps:
            out.append(f"src/{layer}/ is not in the layer graph")
    public = sorted(p.stem for p in (root / "include" / "weft").glob("*.h"))
    for h in public:
        if h not in header_layer:
            out.append(f"include/weft/{h}.h is not placed in a layer")

    def check(path, layer, allow_internal, own=("commands.h",)):
        for inc in INCLUDE_RE.findall(path.read_text(errors="replace")):
            rel = path.relative_to(root)
            if inc.startswith("weft/"):
                h = inc[len("weft/"):-2]
                owner = header_layer.get(h)
                if owner is None:
                    continue  # reported above, or not a header of ours
                if layer is not None and owner != layer and owner not in deps.get(layer, ()):
                    out.append(f"{rel}: includes {inc} (layer {owner}), which layer {layer} may not use")
            elif "/" in inc:
                top = inc.split("/", 1)[0]
                if not allow_internal or top != layer:
                    out.append(f"{rel}: includes {inc}, another module's internal header")
            elif not allow_internal and inc not in own:
                out.append(f"{rel}: includes {inc}, which is not a public header")

    for layer in src_layers:
        for p in sorted((root / "src" / layer).rglob("*.[ch]")):
            check(p, layer, True)
    for p in sorted((root / "include" / "weft").glob("*.h")):
        check(p, header_layer.get(p.stem), False)
    for p in sorted((root / "tools").glob("*.[ch]")):
        check(p, None, False)
    for p in sorted((root / "python" / "csrc").glob("*.[ch]")):
        check(p, None, False, own=("pyweft.h",))
    return out


def test_layers_follow_the_documented_graph():
    deps, header_layer = parse_rule(DOC.read_text())
    bad = violations(ROOT, deps, header_layer)
    assert not bad, "the layering in docs/architecture.md is broken:\n" + "\n".join(bad)


def test_the_check_catches_a_breach(tmp_path):
    """The checker itself, on a small tree with one of each breach."""
    (tmp_path / "src" / "core").mkdir(parents=True)
    (tmp_path / "src" / "model").mkdir(parents=True)
    (tmp_path / "src" / "extra").mkdir(parents=True)
    (tmp_path / "include" / "weft").mkdir(parents=True)
    (tmp_path / "tools").mkdir()
    (tmp_path / "include" / "weft" / "status.h").write_text("")
    (tmp_path / "include" / "weft" / "model.h").write_text('#include "weft/status.h"\n')
    (tmp_path / "include" / "weft" / "stray.h").write_text("")
    (tmp_path / "src" / "core" / "a.c").write_text('#include "weft/model.h"\n')   # upward
    (tmp_path / "src" / "model" / "b.c").write_text('#include "weft/status.h"\n#include "core/x_impl.h"\n')
    (tmp_path / "tools" / "t.c").write_text('#include "model/model_impl.h"\n#include "weft/model.h"\n')
    (tmp_path / "python" / "csrc").mkdir(parents=True)
    (tmp_path / "python" / "csrc" / "p.c").write_text('#include "pyweft.h"\n#include "data/loader_impl.h"\n')
    deps, header_layer = parse_rule(
        "<!-- layer graph -->\n```\ncore ← model\ncore: status\nmodel: model\n```\n")
    assert deps == {"core": set(), "model": {"core"}}
    bad = violations(tmp_path, deps, header_layer)
    assert any("src/extra/ is not in the layer graph" in b for b in bad)
    assert any("stray.h is not placed" in b for b in bad)
    assert any("src/core/a.c: includes weft/model.h (layer model)" in b for b in bad)
    assert any("src/model/b.c: includes core/x_impl.h" in b for b in bad)
    assert any("tools/t.c: includes model/model_impl.h" in b for b in bad)
    assert any("python/csrc/p.c: includes data/loader_impl.h" in b for b in bad)
    assert len(bad) == 6, bad
    with pytest.raises(AssertionError, match="cycle"):
        parse_rule("<!-- layer graph -->\n```\na ← b\nb ← a\n```\n")
