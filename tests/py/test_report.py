"""`weft report` end to end: a synthetic run (tests/tools/metrics_dump.c,
with a loss spike and a rollback) is turned into an HTML page, which
headless Chromium (Debian's `chromium`) lays out and paints. Two checks that
the plots render with data: a script added to a copy of the page measures
every drawn series in the laid-out SVG (lengths, bounding boxes) and
Chromium's --dump-dom returns the result; and a screenshot, decoded here,
has data-coloured pixels inside every plot's box (decoded with Pillow)."""
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from conftest import BUILD

PLOTS = ["loss", "lr", "grad_norm", "tokens_per_s", "mfu", "memory", "step_time"]
WINDOW = (1400, 3000)

CHECK_SCRIPT = """
<script>
window.addEventListener('load', () => {
  const out = [];
  for (const svg of document.querySelectorAll('svg.plot')) {
    const r = svg.getBoundingClientRect();
    const data = svg.querySelector('g.data');
    const bb = data ? data.getBBox() : {width: 0, height: 0};
    const frame = svg.querySelector('rect.frame').getBBox();
    let length = 0, points = 0;
    for (const pl of svg.querySelectorAll('polyline.series')) {
      length += pl.getTotalLength();
      points += pl.points.numberOfItems;
    }
    let area = 0;
    for (const p of svg.querySelectorAll('path.area')) {
      const b = p.getBBox();
      area += b.width * b.height;
    }
    out.push({plot: svg.dataset.plot, values: +svg.dataset.values,
              x: r.x + window.scrollX, y: r.y + window.scrollY, w: r.width, h: r.height,
              data_w: bb.width, data_h: bb.height, frame_w: frame.width,
              length: length, points: points, area: area,
              dots: svg.querySelectorAll('circle.dot').length,
              spikes: svg.querySelectorAll('circle.spike-dot').length});
  }
  const pre = document.createElement('pre');
  pre.id = 'render-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.fail("chromium is not installed: run scripts/setup.sh (Debian package chromium)")
    return exe


def run_chromium(args, tmp_path):
    env = dict(os.environ, HOME=str(tmp_path))  # crash reports and caches go there, not to ~
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           "--hide-scrollbars", "--force-device-scale-factor=1", "--no-first-run",
           f"--user-data-dir={tmp_path / 'chromium-profile'}",
           f"--window-size={WINDOW[0]},{WINDOW[1]}"] + args
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    d = tmp_path_factory.mktemp("report") / "run"
    exe = BUILD / "tests" / "tools" / "metrics_dump"
    p = subprocess.run([str(exe), str(d), "steps=300", "spike_at=200", "rollback=1"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return d


def test_report_cli(report, run_weft, tmp_path):
    out = tmp_path / "r.html"
    p = run_weft(["report", report, "--output", out])
    assert str(out) in p.stdout
    html = out.read_text()
    assert html.startswith("<!DOCTYPE html>")
    # self-contained: nothing is fetched
    assert not re.search(r'\b(src|href)\s*=', html)
    for plot in PLOTS:
        assert f'data-plot="{plot}"' in html
    # the default output goes into the run directory
    run_weft(["report", report])
    assert (report / "report.html").read_text().count("<svg") == len(PLOTS)
    # the run record is shown
    assert "peak 0.05 TFLOP/s (from the config" in html
    assert "[model]" in html and "preset = &quot;tiny&quot;" in html


def test_report_errors(run_weft, tmp_path):
    p = run_weft(["report", tmp_path], check=False)
    assert p.returncode == 1
    assert "metrics.jsonl" in p.stderr and "cannot open" in p.stderr
    (tmp_path / "metrics.jsonl").write_text("garbage\n")
    p = run_weft(["report", tmp_path], check=False)
    assert p.returncode == 1 and "no step records" in p.stderr
    p = run_weft(["report", "--help"])
    assert "RUN_DIR" in p.stdout
    assert run_weft(["report"], check=False).returncode == 1


def test_report_renders_in_chromium(report, run_weft, tmp_path):
    html_path = tmp_path / "report.html"
    run_weft(["report", report, "--output", html_path])
    checked = tmp_path / "checked.html"
    checked.write_text(html_path.read_text().replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = run_chromium(["--dump-dom", checked.as_uri()], tmp_path).stdout
    m = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    assert m, "the check script did not run: " + dom[-2000:]
    plots = {p["plot"]: p for p in json.loads(m.group(1).replace("&quot;", '"'))}
    assert sorted(plots) == sorted(PLOTS)
    for name, p in plots.items():
        assert p["values"] > 0, name
        assert p["w"] > 400 and p["h"] > 150, (name, p)  # laid out at a readable size
        # the data spans the plot's width (steps 1..300)
        assert p["data_w"] > 0.9 * p["frame_w"], (name, p)
        if name == "step_time":
            assert p["area"] > 0.3 * p["frame_w"] * p["h"] * 0.5, p  # filled stacked areas
        else:
            assert p["length"] > p["frame_w"], (name, p)  # lines, not dots
            assert p["points"] >= 2, (name, p)
    # 300 steps, drawn at most two points per pixel column
    assert plots["loss"]["points"] <= 2 * plots["loss"]["frame_w"] + 4
    assert plots["loss"]["dots"] == 300 // 20  # validation losses
    assert plots["loss"]["spikes"] == 1 and plots["grad_norm"]["spikes"] == 1
    assert "<td class=\"num\">200</td><td class=\"num\">199</td>" in dom  # spike table: step, data position

    # Painted pixels: a screenshot, decoded here; every plot's box has
    # pixels of its series' colours.
    shot = tmp_path / "shot.png"
    run_chromium([f"--screenshot={shot}", html_path.as_uri()], tmp_path)
    img = read_png(shot)
    assert img.shape[1] == WINDOW[0]
    colours = {"loss": "#1f77b4", "lr": "#2ca02c", "grad_norm": "#9467bd", "tokens_per_s": "#17becf",
               "mfu": "#e377c2", "memory": "#d62728", "step_time": "#1f77b4"}
    for name, colour in colours.items():
        p = plots[name]
        y0, y1 = int(p["y"]), int(p["y"] + p["h"])
        x0, x1 = int(p["x"]), int(p["x"] + p["w"])
        assert y1 <= img.shape[0], f"plot {name} lies below the screenshot"
        box = img[y0:y1, x0:x1, :3].astype(int)
        want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
        near = (np.abs(box - want).sum(axis=2) < 60).sum()
        assert near > 150, f"plot {name}: only {near} pixels near {colour}"
    # and the page is not blank overall
    packed = img[:, :, 0].astype(np.int32) << 16 | img[:, :, 1].astype(np.int32) << 8 | img[:, :, 2]
    assert len(np.unique(packed)) > 50


def read_png(path):
    """The screenshot as an (h, w, channels) array."""
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))
