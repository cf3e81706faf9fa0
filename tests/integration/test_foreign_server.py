"""A stranger on the run's port is never taken for the run's inference server
(rlcore.processes.health: the server proves the attempt's nonce on /health). The stranger is a real
program, a small HTTP server that answers 200 on every route (/health, and /v1/models listing the
run's own model, so that only the proof tells it apart) and records each request it gets. `rl` exits
2 naming the port and the stranger's pid, no process of the run is left, and nothing but /health
(with a challenge, never a token) reaches the stranger."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.helpers import (
    MARK_ENV,
    REPO,
    free_port,
    gone_within,
    kill_marked,
    run_state,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration

STRANGER = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port, model, record = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Anything(BaseHTTPRequestHandler):
    def answer(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(record, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "headers": dict(self.headers)}) + "\\n")
        body = json.dumps({"object": "list", "data": [{"id": model, "max_model_len": 4096}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_GET = do_POST = answer

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", port), Anything)
print("listening", flush=True)
server.serve_forever()
"""


def start_stranger(port: int, model: Path, record: Path) -> subprocess.Popen:
    stranger = subprocess.Popen(
        [sys.executable, "-c", STRANGER, str(port), str(model), str(record)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stranger.stdout.readline().strip() == "listening", "the stranger could not bind"
    return stranger


def requests_to(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def assert_only_challenged_health(record: Path) -> None:
    """Nothing but GET /health reached the stranger, never with a token or key."""
    seen = requests_to(record)
    assert {(r["method"], r["path"]) for r in seen} <= {("GET", "/health")}, seen
    assert not [r for r in seen if "authorization" in {k.lower() for k in r["headers"]}], seen


def start_rl(config: Path, log: Path) -> tuple[subprocess.Popen, str]:
    mark = uuid.uuid4().hex
    rl = subprocess.Popen(
        [sys.executable, "-m", "launcher.rl", "@", str(config)],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, MARK_ENV: mark},
    )
    return rl, mark


def test_a_stranger_on_the_port_before_the_start_is_named_and_nothing_starts(
    tiny_model_dir, tmp_path
):
    port, out, log = free_port(), tmp_path / "run", tmp_path / "rl.log"
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, port))
    stranger = start_stranger(port, tiny_model_dir, tmp_path / "requests.jsonl")
    try:
        rl, mark = start_rl(config, log)
        try:
            assert rl.wait(timeout=300) == 2, log.read_text()
            gone_within(mark, 5)
        finally:
            kill_marked(mark)
        text = log.read_text()
        assert f"port {port} on 127.0.0.1 is in use" in text, text
        assert f"pid {stranger.pid} (`{sys.executable} -c" in text, text
        assert not (out / "logs").exists() and "Traceback" not in text
        assert stranger.poll() is None
        assert_only_challenged_health(tmp_path / "requests.jsonl")
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stranger_that_takes_the_port_during_the_start_is_never_taken_for_inference(
    tiny_model_dir, tmp_path
):
    """The stranger binds the port right after `rl` started inference, before inference binds
    it (vLLM takes seconds to import): inference dies on bind, the stranger answers /health."""
    port, out, log = free_port(), tmp_path / "run", tmp_path / "rl.log"
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, port))
    record = tmp_path / "requests.jsonl"
    rl, mark = start_rl(config, log)
    stranger = None
    try:
        wait_for(
            lambda: "inference" in run_state(out).get("pids", {}),
            300,
            "inference started",
            interval_s=0.05,
            proc=rl,
            log=log,
        )
        stranger = start_stranger(port, tiny_model_dir, record)
        assert rl.wait(timeout=300) == 2, log.read_text()
        took_s = gone_within(mark, 30)
        print(f"every process of the run gone {took_s:.1f} s after rl exited")
    finally:
        kill_marked(mark)
        if stranger is not None:
            stranger.kill()
            stranger.wait()
    text = log.read_text()
    assert "inference is healthy" not in text, text
    assert f"port {port}" in text and f"pid {stranger.pid}" in text, text
    assert run_state(out)["status"] == "failed"
    assert_only_challenged_health(record)
