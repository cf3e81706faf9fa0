"""Fault matrix, inference side: a server that never answers, or answers health checks but
hangs on generation. The orchestrator must fail inside its timeout with a message, not hang.

The misbehaving server is a stand-in at the network boundary: only a fake can be made to hang."""

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.integration.helpers import REPO

pytestmark = pytest.mark.integration


def run_orchestrator(out: Path, model: Path, base_url: str, *flags: str) -> tuple[int, str, float]:
    cmd = [
        sys.executable,
        "-m",
        "orchestrator.main",
        "--output-dir",
        str(out),
        "--model.name",
        str(model),
        "--client.base-url",
        base_url,
        "--max-steps",
        "2",
        "--batch-size",
        "2",
        "--rollouts-per-example",
        "2",
        *flags,
    ]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def test_server_that_never_answers(tmp_path, tiny_model_dir):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)  # accepts connections (kernel backlog) but never replies
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        code, output, took = run_orchestrator(
            tmp_path / "run", tiny_model_dir, url, "--client.health-timeout-s", "5"
        )
    assert code != 0 and took < 90, output
    assert url.removesuffix("/v1") in output and "Traceback" not in output


class HangingGeneration(BaseHTTPRequestHandler):
    """Healthy and lists the model, but every generation request hangs."""

    model = ""

    def do_GET(self):  # noqa: N802 (http.server API)
        body = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
        payload = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def do_POST(self):  # noqa: N802
        time.sleep(600)

    def log_message(self, *args):
        pass


def test_server_that_hangs_on_generation(tmp_path, tiny_model_dir):
    HangingGeneration.model = str(tiny_model_dir)
    server = ThreadingHTTPServer(("127.0.0.1", 0), HangingGeneration)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        code, output, took = run_orchestrator(
            tmp_path / "run", tiny_model_dir, url, "--client.timeout-s", "5"
        )
    finally:
        server.shutdown()
    assert code != 0 and took < 120, output
    assert "timeout" in output.lower() or "timed out" in output.lower(), output
    assert "Traceback" not in output
