"""`weft prep` with inputs in an object store (SeaweedFS on loopback): the
same crawl read from s3:// gives the same documents as from disk, each
named by its URL (document ids are `<url>#<record>`); a missing input is
named before anything runs."""
import pytest

from conftest import run_weft_cmd
from test_prep_cli import crawl, wet, read_docs, stats_without_times  # noqa: F401 (fixtures)

pytest.importorskip("boto3")


def test_prep_reads_s3_inputs(seaweedfs, crawl, wet, tmp_path):  # noqa: F811
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"))
    s3 = seaweedfs.client()
    urls = []
    for i, f in enumerate((crawl, wet)):
        key = f"prep-in/{i}-{f.name}"
        s3.upload_file(str(f), "weft", key)
        urls.append(f"s3://weft/{key}")
    run_weft_cmd(["prep", "--output", tmp_path / "local", crawl, wet], env=env, timeout=300)
    run_weft_cmd(["prep", "--output", tmp_path / "s3", *urls], env=env, timeout=300)
    a, b = read_docs(tmp_path / "local"), read_docs(tmp_path / "s3")
    assert len(a) == len(b) > 0
    names = {str(crawl): urls[0], str(wet): urls[1]}
    for x, y in zip(a, b):
        src, _, rec = x["id"].rpartition("#")
        assert y["id"] == f"{names[src]}#{rec}"
        assert {k: v for k, v in x.items() if k not in ("id", "_shard")} == \
            {k: v for k, v in y.items() if k not in ("id", "_shard")}
    sa, sb = stats_without_times(tmp_path / "local")["stages"], stats_without_times(tmp_path / "s3")["stages"]
    for st in (sa, sb):  # the JSONL's size follows the ids' length
        st["output"]["counters"].pop("jsonl_bytes")
    assert sa == sb
    p = run_weft_cmd(["prep", "--output", tmp_path / "bad", "s3://weft/prep-in/nope.warc.gz"], env=env,
                     check=False)
    assert p.returncode == 1 and "input s3://weft/prep-in/nope.warc.gz" in p.stderr and "no object" in p.stderr


def test_prep_writes_s3_output(seaweedfs, crawl, wet, tmp_path):  # noqa: F811
    """--output s3://...: the shards, stats.txt and stats.json (last) are
    uploaded, byte for byte what a run on disk writes; a second run sees the
    output complete; a run split into tasks is refused."""
    env = seaweedfs.env(WEFT_STORE_CACHE=str(tmp_path / "cache"), TMPDIR=str(tmp_path))
    s3 = seaweedfs.client()
    run_weft_cmd(["prep", "--output", tmp_path / "local", crawl, wet], env=env, timeout=300)
    run_weft_cmd(["prep", "--output", "s3://weft/prep-out/", crawl, wet], env=env, timeout=300)
    local = sorted(str(p.relative_to(tmp_path / "local")) for p in (tmp_path / "local").rglob("*")
                   if p.is_file() and not str(p.relative_to(tmp_path / "local")).startswith(("_prep", ".")))
    keys = sorted(o["Key"][len("prep-out/"):] for o in s3.list_objects_v2(Bucket="weft", Prefix="prep-out/")["Contents"])
    assert keys == local and "stats.json" in keys
    for k in keys:
        if k.endswith(".jsonl.zst"):
            body = s3.get_object(Bucket="weft", Key=f"prep-out/{k}")["Body"].read()
            assert body == (tmp_path / "local" / k).read_bytes(), k
    assert not list(tmp_path.glob("weft-prep-*")), "the staging folder is left"
    p = run_weft_cmd(["prep", "--output", "s3://weft/prep-out", crawl, wet], env=env, timeout=300)
    assert "already complete" in p.stderr
    p = run_weft_cmd(["prep", "--output", "s3://weft/prep-out2", "--tasks", "2", "--task", "0", crawl, wet],
                     env=env, check=False)
    assert p.returncode == 1 and "one task" in p.stderr
