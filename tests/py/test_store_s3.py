"""`weft store` (the store layer, src/store) against two real S3 servers
(SeaweedFS and rclone's `serve s3`, both checking signatures), with boto3 as the independent reader
and writer: what weft writes boto3 reads back byte for byte, and the other
way round; listings across pages (continuation tokens); multipart uploads;
ranged reads; deletes; and the errors a user meets (a missing key or
bucket, a wrong secret or key id, a corrupted object, no server)."""
import hashlib
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import xxhash

import s3_servers

pytest.importorskip("boto3")


@pytest.fixture(params=["seaweedfs", "rclone_s3"])
def server(request):
    """Each test runs against both servers."""
    return request.getfixturevalue(request.param)


def meta(obj):
    """An object's user metadata, names lower-cased (rclone answers Weft-Xxh3)."""
    return {k.lower(): v for k, v in obj["Metadata"].items()}


def run(weft_bin, env, *args, ok=True, binary=False):
    p = subprocess.run([str(weft_bin), "store", *args], env=env, capture_output=True, timeout=300)
    if ok:
        assert p.returncode == 0, p.stderr.decode(errors="replace")
    else:
        assert p.returncode == 1, (p.returncode, p.stdout[:500], p.stderr)
    return p.stdout if binary else p.stdout.decode(), p.stderr.decode(errors="replace")


def test_put_get_roundtrip_with_boto3(weft_bin, server, tmp_path):
    env, s3 = server.env(), server.client()
    src = tmp_path / "small.bin"
    data = os.urandom(100_003)
    src.write_bytes(data)
    run(weft_bin, env, "cp", str(src), "s3://weft/rt/small.bin")
    obj = s3.get_object(Bucket="weft", Key="rt/small.bin")
    assert obj["Body"].read() == data
    assert meta(obj)["weft-xxh3"] == xxhash.xxh3_64(data).hexdigest()
    # boto3 writes keys with spaces, unicode and '+'; weft lists and reads them.
    keys = ["rt/odd/a b.txt", "rt/odd/ünï/日本.txt", "rt/odd/x+y=z&w.txt", "rt/odd/~t-_.(1)"]
    for i, k in enumerate(keys):
        s3.put_object(Bucket="weft", Key=k, Body=f"body {i} {k}".encode())
    out, _ = run(weft_bin, env, "ls", "--json", "s3://weft/rt/odd/")
    import json
    listed = [json.loads(line) for line in out.splitlines()]
    assert [x["url"] for x in listed] == sorted(f"s3://weft/{k}" for k in keys)
    for i, k in enumerate(keys):
        got, _ = run(weft_bin, env, "cat", f"s3://weft/{k}", binary=True)
        assert got == f"body {i} {k}".encode()
    dst = tmp_path / "back.bin"
    run(weft_bin, env, "cp", "s3://weft/rt/small.bin", str(dst))
    assert dst.read_bytes() == data
    out, _ = run(weft_bin, env, "stat", "s3://weft/rt/small.bin")
    assert int(out) == len(data)


def test_ranged_reads(weft_bin, server):
    env, s3 = server.env(), server.client()
    data = bytes(range(256)) * 4000 + b"tail"
    s3.put_object(Bucket="weft", Key="range/obj", Body=data)
    for off, n in [(0, 1), (1, 255), (1000, 50_000), (len(data) - 4, 4), (12345, 0)]:
        got, _ = run(weft_bin, env, "cat", "--offset", str(off), "--length", str(n), "s3://weft/range/obj",
                     binary=True)
        assert got == data[off:off + n], (off, n)
    got, _ = run(weft_bin, env, "cat", "--offset", "1000000", "s3://weft/range/obj", binary=True)
    assert got == data[1000000:]
    _, err = run(weft_bin, env, "cat", "--offset", str(len(data) - 2), "--length", "10", "s3://weft/range/obj",
                 ok=False)
    assert "s3://weft/range/obj" in err


def test_multipart_upload(weft_bin, server, tmp_path):
    env, s3 = server.env(), server.client()
    src = tmp_path / "big.bin"
    data = os.urandom(5 * 1024 * 1024 * 2 + 12345)  # three parts of 5 MiB
    src.write_bytes(data)
    run(weft_bin, env, "cp", "--store.part_mb=5", "--store.threads=3", str(src), "s3://weft/mp/big.bin")
    obj = s3.get_object(Bucket="weft", Key="mp/big.bin")
    body = obj["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(data).digest()
    if server.kind == "seaweedfs":  # rclone's ETag is the whole object's MD5 either way
        assert obj["ETag"].strip('"').endswith("-3"), obj["ETag"]  # a multipart object of three parts
    assert meta(obj)["weft-xxh3"] == xxhash.xxh3_64(data).hexdigest()
    # No upload is left open.
    assert not s3.list_multipart_uploads(Bucket="weft", Prefix="mp/").get("Uploads")
    got, _ = run(weft_bin, env, "cat", "s3://weft/mp/big.bin", binary=True)
    assert got == data
    # downloaded as three ranged GETs in parallel, into place
    run(weft_bin, env, "cp", "--store.part_mb=5", "--store.threads=3", "s3://weft/mp/big.bin", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == data
    # a download whose bytes do not hash to the object's XXH3 is refused and leaves no file
    s3.put_object(Bucket="weft", Key="mp/bad.bin", Body=data, Metadata={"weft-xxh3": "0123456789abcdef"})
    _, err = run(weft_bin, env, "cp", "--store.part_mb=5", "s3://weft/mp/bad.bin", str(tmp_path / "bad"), ok=False)
    assert "0123456789abcdef" in err and not (tmp_path / "bad").exists()
    assert not list(tmp_path.glob("bad*"))


def test_listing_across_pages(weft_bin, server):
    """More keys than one ListObjectsV2 page holds (1000): weft follows the
    continuation tokens."""
    env, s3 = server.env(), server.client()
    keys = [f"many/k{i:05d}" for i in range(1203)]
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda k: s3.put_object(Bucket="weft", Key=k, Body=k.encode()), keys))
    s3.put_object(Bucket="weft", Key="manyx", Body=b"outside the prefix")
    out, _ = run(weft_bin, env, "ls", "s3://weft/many/")
    lines = out.splitlines()
    assert [line.split()[1] for line in lines] == [f"s3://weft/{k}" for k in keys]
    assert all(int(line.split()[0]) == len("many/k00000") for line in lines)
    out, _ = run(weft_bin, env, "ls", "s3://weft/many")  # a prefix, not a folder
    assert len(out.splitlines()) == len(keys) + 1


def test_delete(weft_bin, server):
    env, s3 = server.env(), server.client()
    s3.put_object(Bucket="weft", Key="del/a", Body=b"a")
    s3.put_object(Bucket="weft", Key="del/b", Body=b"b")
    run(weft_bin, env, "rm", "s3://weft/del/a", "s3://weft/del/never-there")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="weft", Prefix="del/").get("Contents", [])]
    assert keys == ["del/b"]


def test_missing_key_and_bucket_are_named(weft_bin, server):
    env = server.env()
    _, err = run(weft_bin, env, "stat", "s3://weft/no/such/key", ok=False)
    assert "no object 'no/such/key' in bucket 'weft'" in err and server.endpoint in err
    _, err = run(weft_bin, env, "cat", "s3://weft/no/such/key", ok=False)
    assert "no object 'no/such/key' in bucket 'weft'" in err
    _, err = run(weft_bin, env, "stat", "s3://no-such-bucket/k", ok=False)
    assert "no bucket 'no-such-bucket'" in err
    _, err = run(weft_bin, env, "ls", "s3://no-such-bucket/", ok=False)
    assert "no-such-bucket" in err


def test_wrong_credentials_are_refused_naming_the_key_id(weft_bin, server):
    env = server.env(AWS_SECRET_ACCESS_KEY="not-the-secret-at-all")
    _, err = run(weft_bin, env, "ls", "s3://weft/", ok=False)
    assert "refused by " + server.endpoint in err and f"'{server.access_key}'" in err
    assert "not-the-secret-at-all" not in err
    env = server.env(AWS_ACCESS_KEY_ID="AKIAUNKNOWN")
    _, err = run(weft_bin, env, "stat", "s3://weft/rt/small.bin", ok=False)
    assert "'AKIAUNKNOWN'" in err and server.secret_key not in err


def test_credentials_from_a_profile(weft_bin, server, tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
                     f"[weft-test]\naws_access_key_id = {server.access_key}\n"
                     f"aws_secret_access_key = {server.secret_key}\n")
    env = server.env(AWS_SHARED_CREDENTIALS_FILE=str(creds), AWS_PROFILE="weft-test")
    del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
    server.client().put_object(Bucket="weft", Key="prof/x", Body=b"via profile")
    out, _ = run(weft_bin, env, "cat", "s3://weft/prof/x")
    assert out == "via profile"
    env["AWS_PROFILE"] = "default"
    _, err = run(weft_bin, env, "cat", "s3://weft/prof/x", ok=False)
    assert "'wrong'" in err and "profile 'default'" in err
    env["AWS_PROFILE"] = "absent"
    _, err = run(weft_bin, env, "cat", "s3://weft/prof/x", ok=False)
    assert "no S3 credentials" in err


def test_corrupted_object_is_refused(weft_bin, server):
    """An object whose bytes do not hash to the XXH3 it was written with
    (here: written by boto3 with a wrong one) is refused by a whole read."""
    env, s3 = server.env(), server.client()
    s3.put_object(Bucket="weft", Key="bad/x", Body=b"payload", Metadata={"weft-xxh3": "0123456789abcdef"})
    _, err = run(weft_bin, env, "cat", "s3://weft/bad/x", ok=False)
    assert "s3://weft/bad/x" in err and "0123456789abcdef" in err
    s3.put_object(Bucket="weft", Key="bad/y", Body=b"payload",
                  Metadata={"weft-xxh3": xxhash.xxh3_64(b"payload").hexdigest()})
    out, _ = run(weft_bin, env, "cat", "s3://weft/bad/y")
    assert out == "payload"


def test_no_server_fails_after_bounded_retries(weft_bin, server):
    port = s3_servers.free_ports(1)[0]
    env = server.env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    _, err = run(weft_bin, env, "stat", "--store.retries=2", "--store.timeout_s=2", "s3://weft/x", ok=False)
    assert f"no answer from http://127.0.0.1:{port} after 3 attempts" in err
    assert err.count("retry ") == 2  # each retry logged with the URL
    assert "s3://weft/x" in err.splitlines()[0]


def test_local_paths_through_the_same_commands(weft_bin, tmp_path):
    d = tmp_path / "loc"
    (d / "sub").mkdir(parents=True)
    (d / "a.txt").write_text("aaa")
    (d / "sub" / "b.txt").write_text("bb")
    out, _ = run(weft_bin, dict(os.environ), "ls", str(d))
    assert [line.split() for line in out.splitlines()] == [["3", f"{d}/a.txt"], ["2", f"{d}/sub/b.txt"]]
    out, _ = run(weft_bin, dict(os.environ), "ls", f"{d}/su")
    assert out.split() == ["2", f"{d}/sub/b.txt"]
    run(weft_bin, dict(os.environ), "cp", str(d / "a.txt"), str(d / "c.txt"))
    out, _ = run(weft_bin, dict(os.environ), "cat", "--offset", "1", "--length", "2", str(d / "c.txt"))
    assert out == "aa"
    run(weft_bin, dict(os.environ), "rm", str(d / "c.txt"))
    assert not (d / "c.txt").exists()
