"""The evaluation's own inference server: `inference` started as a command on the model to
evaluate (its own port, its log in the output folder), ready when /health answers, always
stopped at the end."""

import logging
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcore.errors import ConfigError
from rlcore.health import free_port, probe_health, server_url
from rlcore.toml_io import write_config

logger = logging.getLogger("orchestrator")


@contextmanager
def own_server(model: str, settings: dict[str, Any], out: Path, seq_len: int, timeout_s: float):
    """Serve `model` for the block; yields the OpenAI base URL (…/v1)."""
    settings = {**settings, "model": {**settings.get("model", {}), "name": model}}
    server = settings.setdefault("server", {})
    host = server.setdefault("host", "127.0.0.1")
    server.setdefault("port", free_port(host))
    settings["model"].setdefault("max_model_len", seq_len)
    # A request's logits independent of its batch: the same policy and seed give the same
    # results, whatever else is in flight (README: Reproducible runs).
    settings.setdefault("deterministic", True)
    settings["output_dir"] = str(out / "server")
    config_file = out / "inference.toml"
    write_config(settings, config_file)
    log_path = out / "inference.log"
    logger.info(f"starting an inference server for {model} (log: {log_path})")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "inference.main", "@", str(config_file)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        root = server_url(host, server["port"])
        wait_ready(process, root, timeout_s, log_path)
        yield root + "/v1"
    finally:
        stop(process)


def wait_ready(process: subprocess.Popen, root: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while (problem := probe_health(root, timeout_s=2.0)) is not None:
        if process.poll() is not None:
            last = log_path.read_text().strip().splitlines()[-5:]
            raise ConfigError(
                f"the evaluation's inference server exited with {process.returncode} before it "
                f"was ready; the end of {log_path}:\n" + "\n".join(last)
            )
        if time.monotonic() > deadline:
            raise ConfigError(f"the inference server at {root} was not ready in {timeout_s:.0f} "
                              f"s ({problem}); see {log_path}")  # fmt: skip
        time.sleep(1.0)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
