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
