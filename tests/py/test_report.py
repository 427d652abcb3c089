"""`weft report` end to end: a synthetic run (tests/tools/metrics_dump.c,
with a loss spike and a rollback) is turned into an HTML page, which
headless Chromium (Debian's `chromium`) lays out and paints. Two checks that
the plots render with data: a script added to a copy of the page measures
every drawn series in the laid-out SVG (lengths, bounding boxes) and
Chromium's --dump-dom returns the result; and a screenshot, decoded here,
has data-coloured pixels inside every plot's box (decoded with Pillow).

Ranks: a real 2-rank `weft train` (Open MPI, metrics.all_ranks) gives a
page with the Ranks section, whose numbers are checked against medians
recomputed here from the two metrics.jsonl files, and per-rank plots laid
out with a line per rank; a page without ranks/ has no such section.

Evaluation: an eval.jsonl written here (two datasets, a step evaluated
twice, a damaged line) gives the Evaluation section, its table and its
plots laid out, and the evaluations as dots on the loss plot."""
import json
import os
import re
import shutil
import statistics
import subprocess

import numpy as np
import pytest

import mpi_launch
from conftest import BUILD, run_weft_cmd

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
    assert 'id="ranks"' not in html_path.read_text()  # one process: no Ranks section
    # and the page is not blank overall
    packed = img[:, :, 0].astype(np.int32) << 16 | img[:, :, 1].astype(np.int32) << 8 | img[:, :, 2]
    assert len(np.unique(packed)) > 50


def read_png(path):
    """The screenshot as an (h, w, channels) array."""
    from PIL import Image
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


# ------------------------------------------------------------ ranks

RANK_PLOTS = ["rank_step_s", "rank_comm_s", "rank_host_rss"]


@pytest.fixture(scope="module")
def ranks_run(tmp_path_factory, corpus_dir):
    """A 2-rank run (as tests/py/test_train_dist.py launches one) whose
    ranks both write metrics."""
    d = tmp_path_factory.mktemp("ranks")
    inputs = sorted(corpus_dir.glob("prideprejudice-*.txt"))[:6]
    run_weft_cmd(["tokenizer", "train", "--vocab-size", 512, "--output", d / "tok.json"] + inputs)
    run_weft_cmd(["tokenize", "--tokenizer", d / "tok.json", "--output", d / "data", "--val-fraction", 0.2,
                  "--seed", 3] + inputs)
    run = d / "run"
    args = ["train", "--data", d / "data", "--run-dir", run, "--preset", "tiny", "--steps", 6, "--batch-size", 4,
            "--seq-len", 32, "--lr", 0.01, "--train.eval_every=0", "--threads", 1, "--metrics.peak_tflops=1",
            "--metrics.all_ranks", "--ckpt.every=0"]
    mpi_launch.check(mpi_launch.launch(BUILD / "weft", "openmpi", 2, args, timeout=120), (0,))
    assert (run / "ranks" / "rank-00001" / "metrics.jsonl").exists()
    return run


def jsonl(path):
    return [json.loads(l) for l in path.read_text().splitlines()]


def rank_rows(html):
    """{rank: [the cells of its row in the rank table]}, each cell (data-v or None, text)."""
    table = re.search(r'<table id="rank-table">(.*?)</table>', html, re.S)
    assert table, "no rank table"
    rows = {}
    for m in re.finditer(r'<tr data-rank="(\d+)"([^>]*)>(.*?)</tr>', table.group(1), re.S):
        cells = []
        for attrs, text in re.findall(r'<td([^>]*)>(.*?)</td>', m.group(3), re.S):
            v = re.search(r'data-v="([^"]*)"', attrs)
            cells.append((float(v.group(1)) if v else None, re.sub("<[^>]+>", "", text)))
        rows[int(m.group(1))] = (cells, "slowest" in m.group(2))
    return rows


def shown_time(v):
    """A time as the rank table writes it."""
    if v >= 1:
        return f"{v:.3g} s"
    return f"{v * 1e3:.3g} ms" if v >= 1e-3 or v == 0 else f"{v * 1e6:.3g} \u00b5s"


def expected(records):
    """What the table shows for one rank's records: medians over the steps
    after the first, and the peak RSS."""
    after = records[1:]
    med = lambda k: statistics.median(r[k] for r in after if k in r)
    return {"steps": len(records), "step_s": med("step_s"), "data_s": med("data_s"), "fwd_bwd_s": med("fwd_bwd_s"),
            "comm_s": med("comm_s"), "rss": max(r["host_rss_peak"] for r in records)}


def test_report_ranks_section(ranks_run, run_weft, tmp_path):
    html_path = tmp_path / "report.html"
    run_weft(["report", ranks_run, "--output", html_path])
    html = html_path.read_text()
    assert not re.search(r'\b(src|href)\s*=', html)  # still self-contained
    assert '<section id="ranks"><h2>Ranks</h2>' in html
    want = {0: expected(jsonl(ranks_run / "metrics.jsonl")),
            1: expected(jsonl(ranks_run / "ranks" / "rank-00001" / "metrics.jsonl"))}
    assert want[0]["step_s"] != want[1]["step_s"]  # two processes' own clocks
    rows = rank_rows(html)
    assert sorted(rows) == [0, 1]
    for rank, (cells, _) in rows.items():
        w = want[rank]
        assert cells[0][1] == str(rank)
        assert int(cells[1][1]) == w["steps"] == 6
        for col, key in ((2, "step_s"), (3, "data_s"), (4, "fwd_bwd_s"), (5, "comm_s"), (6, "rss")):
            assert cells[col][0] == pytest.approx(w[key], rel=1e-12, abs=1e-15), (rank, key, cells[col])
        # the shown text is the same number, rounded
        for col, key in ((2, "step_s"), (3, "data_s"), (5, "comm_s")):
            assert cells[col][1] == shown_time(w[key]), (rank, key, cells[col])
        assert cells[6][1] == f"{w['rss'] / 2**20:.1f} MiB"
    # the straggler: percent slower than the fastest median step, the slowest flagged
    slow = max(want, key=lambda r: want[r]["step_s"])
    fast = 1 - slow
    pct = 100 * (want[slow]["step_s"] - want[fast]["step_s"]) / want[fast]["step_s"]
    assert rows[slow][1] and not rows[fast][1]
    assert rows[slow][0][7][0] == pytest.approx(pct, rel=1e-9)
    assert "slowest" in rows[slow][0][7][1] and rows[fast][0][7][0] == 0
    assert "fastest" in rows[fast][0][7][1]

    # laid out in Chromium: the per-rank plots, a line for each rank
    checked = tmp_path / "checked.html"
    checked.write_text(html.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = run_chromium(["--dump-dom", checked.as_uri()], tmp_path).stdout
    m = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    assert m, "the check script did not run: " + dom[-2000:]
    plots = {p["plot"]: p for p in json.loads(m.group(1).replace("&quot;", '"'))}
    assert sorted(plots) == sorted(PLOTS + RANK_PLOTS)
    for name in RANK_PLOTS:
        p = plots[name]
        assert p["values"] == 2 * 6, p  # 6 steps of each rank
        assert p["w"] > 400 and p["h"] > 150, p
        assert p["data_w"] > 0.9 * p["frame_w"] and p["length"] > p["frame_w"], p
    for name in ("rank_step_s", "rank_comm_s"):
        assert re.search(rf'data-plot="{name}".*?data-series="rank 0".*?data-series="rank 1".*?</svg>', dom, re.S)
    assert 'id="rank-table"' in dom and 'data-rank="1"' in dom


def test_report_ranks_damaged_files(ranks_run, run_weft, tmp_path):
    """A rank's file with a step missing and a last line cut short (a
    crash) is read as rank 0's is: the page says what was skipped and
    missing; a rank folder without a file is named, not an error; an empty
    ranks/ folder gives no section."""
    run = tmp_path / "run"
    shutil.copytree(ranks_run, run)
    f = run / "ranks" / "rank-00001" / "metrics.jsonl"
    lines = f.read_text().splitlines(keepends=True)
    del lines[2]  # step 3
    f.write_text("".join(lines) + lines[-1][:40])  # a last line cut short
    (run / "ranks" / "rank-00002").mkdir()
    run_weft(["report", run])
    html = (run / "report.html").read_text()
    assert "rank 1: 1 line of ranks/rank-00001/metrics.jsonl could not be read and was skipped (the first: line 6)" in html
    assert "rank 1 has no record of 1 of rank 0's 6 steps" in html
    rows = rank_rows(html)
    assert sorted(rows) == [0, 1, 2]
    recs = [json.loads(l) for l in lines]
    assert int(rows[1][0][1][1]) == 5
    assert rows[1][0][2][0] == pytest.approx(expected(recs)["step_s"], rel=1e-12)
    assert rows[2][0][1][1].endswith("ranks/rank-00002/metrics.jsonl: no such file")
    # ranks/ without rank folders: the page of one process
    shutil.rmtree(run / "ranks")
    (run / "ranks").mkdir()
    run_weft(["report", run])
    assert 'id="ranks"' not in (run / "report.html").read_text()


# ------------------------------------------------------------ evaluation

ODD = "a<odd-tag>&\"'c"  # every character HTML gives a meaning to


def test_report_escapes_series_names(report, run_weft, tmp_path):
    """A mixture's source names come from metrics.jsonl: in the legends and
    the data-series attributes they must stay text, read back unchanged by
    an HTML parser (Python's html.parser, not weft's code)."""
    from html.parser import HTMLParser
    run = tmp_path / "run"
    shutil.copytree(report, run)
    lines = []
    for i, line in enumerate((report / "metrics.jsonl").read_text().splitlines()):
        r = json.loads(line)
        r["sources"] = {"plain": {"weight": 0.5, "tokens": 64, "tokens_seen": 64 * (i + 1), "loss": r["loss"]},
                        ODD: {"weight": 0.5, "tokens": 64, "tokens_seen": 64 * (i + 1), "loss": r["loss"] + 0.1}}
        lines.append(json.dumps(r))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.html"
    run_weft(["report", run, "--output", out])
    html = out.read_text()

    class Page(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.series, self.legends, self.tags, self._legend = [], [], set(), None

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            self.tags.add(tag)
            if "data-series" in a:
                self.series.append(a["data-series"])
            if tag == "text" and a.get("class") == "legend":
                self._legend = ""

        def handle_data(self, data):
            if self._legend is not None:
                self._legend += data

        def handle_endtag(self, tag):
            if tag == "text" and self._legend is not None:
                self.legends.append(self._legend)
                self._legend = None

    page = Page()
    page.feed(html)
    page.close()
    assert "odd-tag" not in page.tags, "a source's name became markup"
    assert ODD in page.legends and "plain" in page.legends, page.legends
    assert f"{ODD} validation" in page.legends, page.legends  # the loss plot's per-source validation series
    assert page.series.count(ODD) >= 2 and "plain" in page.series, sorted(set(page.series))
    assert ODD not in html  # never raw in the file


def test_report_reads_eval_jsonl_versions_1_and_2(report, run_weft, tmp_path):
    """eval.jsonl of version 1 (no `version` key) and of version 2 (the key
    last, and the downstream tasks' lines) in one file, as a watcher of this
    weft appends to a file an older one began: both versions are shown; a
    line of version 3 is left out, and the report says so."""
    run = tmp_path / "run"
    shutil.copytree(report, run)
    base = {"split": "val", "tokens": 4096, "bytes": 16000, "sequences": 16, "seq_len": 256, "eval_s": 0.5,
            "data_dir": "d"}
    lines = [dict(base, step=s, time=1.0, dataset="old", loss=5.0, bpb=2.0, checkpoint="c") for s in (100, 200)]
    lines += [dict(base, step=s, time=2.0, dataset="new", loss=4.0, bpb=1.5, checkpoint="c", version=2)
              for s in (200, 300)]
    lines += [{"task": "arc_easy", "kind": "mc", "step": 300, "time": 3.0, "shots": 0, "examples": 3, "acc": 0.5,
               "acc_norm": 0.5, "centered": 0.1, "bpb": 3.0, "eval_s": 0.1, "model": "m", "version": 2},
              dict(base, step=300, time=3.0, dataset="future", loss=1.0, bpb=1.0, checkpoint="c", version=3)]
    (run / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    html_path = tmp_path / "report.html"
    run_weft(["report", run, "--output", html_path])
    html = html_path.read_text()
    assert "<td>old</td><td>val</td><td class=\"num\">2</td>" in html
    assert "<td>new</td><td>val</td><td class=\"num\">2</td>" in html
    assert "future" not in html
    assert ("1 line of eval.jsonl (the first: line 6, version 3) is of a format version this weft does not read "
            "(it reads versions 1 to 2)") in html
    assert "could not be read" not in html


def test_report_evaluation_section(report, run_weft, tmp_path):
    """RUN_DIR/eval.jsonl (docs/formats/eval-jsonl.md, as `weft eval
    --watch` writes it) written here: two datasets, a step evaluated twice
    (the later line wins), a line cut short, a loss that is null."""
    run = tmp_path / "run"
    shutil.copytree(report, run)
    lines = []
    for step in range(50, 301, 50):
        for name, every, base in (("austen", 50, 5.0), ("web<b>", 100, 6.0)):
            if step % every:
                continue
            loss = base - step / 100
            lines.append({"step": step, "time": 1.0 + step, "dataset": name, "split": "val", "loss": loss,
                          "bpb": loss / 2, "tokens": 4096, "bytes": 16000, "sequences": 16, "seq_len": 256,
                          "eval_s": 0.5, "data_dir": "d", "checkpoint": f"c/step-{step:07d}"})
    again = dict(lines[1], loss=9.5, bpb=0.5)  # austen step 100 again, later: the best bpb
    text = "".join(json.dumps(r) + "\n" for r in lines) + json.dumps(again) + "\n"
    text += json.dumps(dict(lines[0], step=25, loss=None, bpb=None)) + "\n" + '{"step": 350, "dat\n'
    (run / "eval.jsonl").write_text(text)
    html_path = tmp_path / "report.html"
    run_weft(["report", run, "--output", html_path])
    html = html_path.read_text()
    assert 'id="eval"' in html and "web_b_" in html and "web<b>" not in html
    # austen: 25 (null), 50..300 = 7 steps, 6 values; web: 100, 200, 300
    assert 'data-plot="eval_loss" data-values="9"' in html and 'data-plot="eval_bpb" data-values="9"' in html
    row = ('<tr><td>austen</td><td>val</td><td class="num">7</td><td class="num">300</td><td class="num">2.0000</td>'
           '<td class="num">1.0000</td><td class="num">0.5000</td><td class="num">100</td></tr>')
    assert row in html
    assert "1 line of eval.jsonl could not be read (the first: line 12)" in html
    checked = tmp_path / "checked.html"
    checked.write_text(html.replace("</body>", CHECK_SCRIPT + "</body>"))
    dom = run_chromium(["--dump-dom", checked.as_uri()], tmp_path).stdout
    m = re.search(r'<pre id="render-check">(.*?)</pre>', dom, re.S)
    assert m, "the check script did not run: " + dom[-2000:]
    plots = {p["plot"]: p for p in json.loads(m.group(1).replace("&quot;", '"'))}
    assert sorted(plots) == sorted(PLOTS + ["eval_loss", "eval_bpb"])
    for name in ("eval_loss", "eval_bpb"):
        p = plots[name]
        assert p["w"] > 400 and p["h"] > 150 and p["dots"] == 9, (name, p)
        assert p["length"] > p["frame_w"] * 0.8, (name, p)  # austen's line spans steps 50..300
    # on the loss plot: the validation dots of the run and the evaluations' (at the logged steps)
    assert plots["loss"]["dots"] == 300 // 20 + 9
    assert ">eval austen</text>" in html and ">eval web_b_</text>" in html  # the loss plot's legend


def test_report_compares_runs(report, run_weft, tmp_path):
    """`weft report A B C`: the Comparison section plots each run's training
    and validation loss, and its table says when each run's validation
    loss first reached A's final one (computed here from the records)."""
    def write(d, vals):
        d.mkdir()
        with open(d / "metrics.jsonl", "w") as f:
            for step in range(1, 61):
                rec = {"step": step, "loss": 6.0 - step * 0.01 * vals["rate"]}
                if step % 10 == 0:
                    rec["val_loss"] = round(6.2 - step * 0.012 * vals["rate"], 6)
                f.write(json.dumps(rec) + "\n")
    a, b, c = tmp_path / "adamw", tmp_path / "muon", tmp_path / "slow"
    write(a, {"rate": 1.0})
    write(b, {"rate": 2.0})
    write(c, {"rate": 0.5})
    out = tmp_path / "cmp.html"
    run_weft(["report", a, b, c, "--output", out])
    html = out.read_text()
    assert 'id="compare"' in html and 'data-plot="compare-loss"' in html and 'data-plot="compare-val"' in html
    rows = re.findall(r"<tr><td>([^<]*)</td><td>(\d+)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td>"
                      r"<td>([^<]*)</td></tr>", html)
    by = {os.path.basename(r[0]): r for r in rows}
    target = 6.2 - 60 * 0.012  # a's final validation loss
    for name, rate in (("adamw", 1.0), ("muon", 2.0), ("slow", 0.5)):
        reach = next((s for s in range(10, 61, 10) if round(6.2 - s * 0.012 * rate, 6) <= target + 1e-12), None)
        assert by[name][5] == (str(reach) if reach else "not reached"), (name, by[name])
        assert by[name][3] == f"{6.2 - 60 * 0.012 * rate:.4f}"
    # the first run's own page is whole: its plots and no comparison without others
    run_weft(["report", a, "--output", tmp_path / "one.html"])
    assert 'id="compare"' not in (tmp_path / "one.html").read_text()
    p = run_weft(["report", a, tmp_path / "missing"], check=False)
    assert p.returncode == 1 and "missing" in p.stderr and "metrics.jsonl" in p.stderr
