"""`rl view` as a real process for the integration and browser tests: started with `--port 0`,
its URL read from what it prints, stopped with SIGTERM (SIGKILL if it lingers)."""

import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
URL = re.compile(r"rl view: open (http://\S+)")


class ViewServer:
    def __init__(self, *args: str, env: dict | None = None):
        cmd = [sys.executable, "-m", "launcher.rl", "view", *args, "--port", "0"]
        self.proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.output = ""
        self.url = self.wait_url(timeout_s=60)
        self.base = self.url.split("?")[0].rstrip("/")

    def wait_url(self, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:  # raw reads: a buffered readline would hide lines from select
                chunk = os.read(self.proc.stdout.fileno(), 65536).decode(errors="replace")
                self.output += chunk
                found = URL.search(self.output)
                if found:
                    return found.group(1)
                if not chunk and self.proc.poll() is not None:
                    break
        self.stop()
        raise AssertionError(f"rl view printed no URL:\n{self.output}")

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def raw_get(base: str, path: str, headers: str = "") -> tuple[int, bytes]:
    """GET `path` exactly as written (no client normalizes `..` or decodes anything)."""
    import socket

    host, port = base.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host.strip("[]"), int(port)), timeout=10) as sock:
        request = (
            f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{headers}Connection: close\r\n\r\n"
        )
        sock.sendall(request.encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, data.split(b"\r\n\r\n", 1)[-1]
