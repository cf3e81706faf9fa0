"""The evaluation's own inference server: `inference` started as a command on the model to
evaluate (its own port, reserved from before the start: rlcore.processes.ports; its log in the
output folder; rlcore.processes.children: its own session, gone when the evaluation dies however it
dies), ready when /health answers with the proof of the nonce it was given (rlcore.processes.health:
a stranger on its port is refused), always stopped at the end."""

import logging
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlcore.config.literal_secrets import write_for_child
from rlcore.errors import ConfigError
from rlcore.processes import children, ports
from rlcore.processes.health import SERVER_NONCE_ENV, new_nonce, server_url

logger = logging.getLogger("orchestrator")
STOP_GRACE_S = 30.0
"""Seconds between SIGTERM and SIGKILL when stopping the server."""


@contextmanager
def own_server(model: str, settings: dict[str, Any], out: Path, seq_len: int, timeout_s: float):
    """Serve `model` for the block; yields the OpenAI base URL (…/v1)."""
    settings = {**settings, "model": {**settings.get("model", {}), "name": model}}
    server = settings.setdefault("server", {})
    host = server.setdefault("host", "127.0.0.1")
    server["port"] = own_port(host, server.get("port"))
    settings["model"].setdefault("max_model_len", seq_len)
    # A request's logits independent of its batch: the same policy and seed give the same
    # results, whatever else is in flight (README: Reproducible runs).
    settings.setdefault("deterministic", True)
    settings["output_dir"] = str(out / "server")
    config_file = out / "inference.toml"
    secret_env = write_for_child(settings, config_file, "inference")
    log_path = out / "inference.log"
    logger.info(f"starting an inference server for {model} (log: {log_path})")
    nonce = new_nonce()
    command = [sys.executable, "-m", "inference.main", "@", str(config_file)]
    env = {**secret_env, SERVER_NONCE_ENV: nonce, ports.HELD_ENV: str(server["port"])}
    child = children.start("inference", command, log_path, env)
    try:
        root = server_url(host, server["port"])
        wait_ready(child, root, nonce, timeout_s)
        yield root + "/v1"
    finally:
        children.stop([child], STOP_GRACE_S)


def own_port(host: str, port: Any) -> Any:
    """The server's port, reserved by this process until it exits (rlcore.processes.ports): the one
    given in `inference.server.port` if it is free (else a ConfigError naming it), or when unset
    8000 if free, else the next free one. A value that is not a port is left to `inference` to
    refuse by its own schema."""
    if port is None or port == "None":
        return ports.choose(host)
    if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
        ports.claim(host, port, 1, "--inference.server.port")
    return port


def wait_ready(child: children.Child, root: str, nonce: str, timeout_s: float) -> None:
    """Until the server proves it is the one started here; a ConfigError when it exits first,
    does not answer in `timeout_s`, or another program answers on its port."""
    try:
        children.wait_healthy({"inference": root}, nonce, timeout_s, [child])
    except TimeoutError as err:
        raise ConfigError(f"the evaluation's {err.args[0]}; see {child.log}") from None
    if child.proc.poll() is not None:
        assert child.log is not None, "own_server starts it with a log"
        last = child.log.read_text().strip().splitlines()[-5:]
        raise ConfigError(
            f"the evaluation's inference server exited with {child.proc.returncode} before it "
            f"was ready; the end of {child.log}:\n" + "\n".join(last)
        )
