"""Start and stop an `inference` server as a child process, for tests and benchmarks (`rl`
supervises its servers itself: launcher/supervisor.py). Light module: no torch, no vLLM.
Example:

    args = ["--model.name", str(model_dir), "--server.port", "8101", "--output-dir", str(run)]
    with InferenceProcess(args, log_path=run / "inference.log") as server:
        server.wait_ready(timeout_s=600)
        post_json(server.url + "/v1/chat/completions", {...})
        server.admin_post("/update_weights", {"weight_dir": str(run / "weights/step_1")})
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from rlcore.processes.health import HEALTH_ROUTE, probe_health
from rlcore.processes.poll import wait_until
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV, new_token


class InferenceProcess:
    """`python -m inference.main ARGS` in its own process group, logging to `log_path`.

    `stop()` sends SIGTERM to the server (which shuts its engine down), then SIGKILL to the whole
    group after `grace_s`. The server's admin token is chosen here (`admin_token`, given to it
    as RL_ADMIN_TOKEN), so `admin_post` can swap weights."""

    def __init__(
        self,
        args: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        url: str | None = None,
    ):
        """`url` defaults to the `--server.host` / `--server.port` flags found in `args`."""
        self.args = args
        self.log_path = Path(log_path)
        self.admin_token = (env or {}).get(ADMIN_TOKEN_ENV) or new_token()
        extra = {"PYTHONUNBUFFERED": "1", ADMIN_TOKEN_ENV: self.admin_token}
        self.env = {**os.environ, **extra, **(env or {})}
        self.proc: subprocess.Popen | None = None
        host = arg_value(args, "--server.host", "127.0.0.1")
        self.url = url or f"http://{host}:{arg_value(args, '--server.port', '8000')}"

    def start(self) -> "InferenceProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "inference.main", *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        return self

    def admin_post(self, route: str, payload: dict, timeout_s: float = 600.0):
        """POST to an admin route with this server's token: (status, parsed body)."""
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        return post_json(self.url + route, payload, timeout_s, headers)

    def wait_ready(self, timeout_s: float = 900.0) -> None:
        """Wait until GET /health answers 200; raise if the process exits or time runs out."""
        assert self.proc is not None, "start() first"
        proc = self.proc

        def answers() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"inference exited with code {proc.returncode} before answering "
                    f"{self.url}{HEALTH_ROUTE}; log tail:\n{self.log_tail()}"
                )
            return health_ok(self.url)

        try:
            wait_until(answers, timeout_s, 1.0, f"inference to answer {self.url}{HEALTH_ROUTE}")
        except TimeoutError:
            raise TimeoutError(
                f"inference did not answer {self.url}{HEALTH_ROUTE} within {timeout_s:.0f} s; "
                f"log tail:\n{self.log_tail()}"
            ) from None

    def stop(self, grace_s: float = 60.0) -> int | None:
        """SIGTERM, wait up to `grace_s`, then SIGKILL the process group; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # anything left in the group
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        return self.proc.returncode

    def log_tail(self, num_lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-num_lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> "InferenceProcess":
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()


def arg_value(args: list[str], flag: str, default: str) -> str:
    for spelling in (flag, flag.replace("_", "-")):
        if spelling in args:
            return args[args.index(spelling) + 1]
    return default


def health_ok(url: str) -> bool:
    return probe_health(url) is None


def post_json(
    url: str, payload: dict, timeout_s: float = 600.0, headers: dict[str, str] | None = None
) -> tuple[int, dict]:
    """POST JSON, return (status, parsed body) also for 4xx/5xx answers."""
    response = httpx.post(url, json=payload, headers=headers, timeout=timeout_s)
    return response.status_code, response.json() if response.content else {}
