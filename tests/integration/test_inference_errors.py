"""User errors at `inference` startup: one clear message, exit code 2, before vLLM loads."""

import socket
import subprocess
import sys

import pytest

from rlcore.processes.poll import wait_until

pytestmark = pytest.mark.integration

PORT = 8171


def run_inference(*flags: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "inference.main", *flags],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def assert_user_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    message = [line for line in result.stderr.splitlines() if line.startswith("inference: error")]
    assert len(message) == 1, result.stderr[-2000:]
    for word in words:
        assert word in message[0]


def test_missing_model_folder(tmp_path):
    result = run_inference("--model.name", str(tmp_path / "nope"), "--output-dir", str(tmp_path))
    assert_user_error(result, "model.name", "does not exist")
    assert not (tmp_path / "configs").exists()  # nothing written on a user error


def test_unknown_hub_model(tmp_path):
    # Offline: the hub is unreachable; online: the repository does not exist. Both are errors.
    result = run_inference(
        "--model.name", "no-such-org/no-such-model-xyz", "--output-dir", str(tmp_path)
    )
    assert_user_error(result, "model.name", "no-such-org/no-such-model-xyz")


def test_port_in_use(tmp_path, tiny_model_dir):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", PORT))
        sock.listen()
        result = run_inference(
            "--model.name",
            str(tiny_model_dir),
            "--server.port",
            str(PORT),
            "--output-dir",
            str(tmp_path),
        )
    assert_user_error(result, "server.port", str(PORT), "in use")


@pytest.mark.slow  # two inference processes that import vLLM
def test_vllm_arg_typo_and_bad_value(tmp_path, tiny_model_dir):
    # One process checks both: the typo is found first, so fix it and look at the value.
    common = ["--model.name", str(tiny_model_dir), "--server.port", str(PORT + 1)]
    common += ["--output-dir", str(tmp_path)]
    typo = run_inference(*common, "--vllm-args", "{gpu_memory_utilisation = 0.5}")
    assert_user_error(typo, "vllm_args.gpu_memory_utilisation", "did you mean", "utilization")
    bad = run_inference(*common, "--vllm-args", '{max_num_seqs = "many"}')
    assert_user_error(bad, "vLLM rejected", "--max-num-seqs", "many")


def test_owned_vllm_arg_is_a_config_error(tmp_path):
    result = run_inference("--vllm-args", "{port = 9}", "--output-dir", str(tmp_path))
    assert_user_error(result, "vllm_args", "server.port")


@pytest.mark.slow
def test_sigterm_during_startup_leaves_no_process(tmp_path, tiny_model_dir):
    import signal
    import time

    import psutil

    from tests.inference_process import InferenceProcess

    flags = ["--model.name", str(tiny_model_dir), "--server.port", str(PORT + 2)]
    server = InferenceProcess([*flags, "--output-dir", str(tmp_path / "run")], tmp_path / "inf.log")

    def engine_started() -> list | None:
        """The server's processes once an engine core is among them."""
        if server.proc.poll() is not None:
            raise AssertionError(f"no engine core process appeared:\n{server.log_tail()}")
        children = psutil.Process(server.proc.pid).children(recursive=True)
        return children if any("EngineCore" in c.name() for c in children) else None

    server.start()
    try:
        try:
            children = wait_until(engine_started, 300, 0.5, "an engine core process")
        except TimeoutError:
            raise AssertionError(f"no engine core process appeared:\n{server.log_tail()}") from None
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=60)
        time.sleep(2)  # the resource tracker exits once its parent has gone
        # Checked before stop(), whose SIGKILL to the process group would hide strays.
        strays = [c for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        server.stop()
    assert code == 128 + signal.SIGTERM, server.log_tail()
    assert "SIGTERM during startup" in server.log_path.read_text()
    assert not strays, [(c.pid, c.name()) for c in strays]


@pytest.mark.slow
def test_startup_timeout_stops_the_server(tmp_path, tiny_model_dir):
    result = run_inference(
        "--model.name",
        str(tiny_model_dir),
        "--server.port",
        str(PORT + 3),
        "--output-dir",
        str(tmp_path),
        "--server.startup-timeout-s",
        "0.5",
    )  # forked, vLLM serves the tiny model about 3 s after the watchdog starts
    assert result.returncode == 1, result.stderr[-2000:]
    assert "not ready after 0.5 s (server.startup_timeout_s)" in result.stderr


@pytest.mark.slow
def test_a_killed_server_leaves_no_engine_and_frees_its_port(tmp_path, tiny_model_dir):
    """SIGKILL to a serving inference process: its forked engine core and worker die with it
    (no orphan keeps running) and none of them still holds the port."""
    import signal

    import psutil

    from tests.inference_process import InferenceProcess

    port = PORT + 4
    flags = ["--model.name", str(tiny_model_dir), "--server.port", str(port)]
    server = InferenceProcess([*flags, "--output-dir", str(tmp_path / "run")], tmp_path / "inf.log")
    server.start()
    try:
        server.wait_ready(timeout_s=300)
        children = psutil.Process(server.proc.pid).children(recursive=True)
        assert any("EngineCore" in c.name() for c in children), server.log_tail()
        server.proc.send_signal(signal.SIGKILL)
        server.proc.wait(timeout=30)
        strays = []

        def ended() -> bool:
            strays[:] = [c for c in children if c.is_running() and c.status() != "zombie"]
            return not strays

        try:
            wait_until(ended, 10, 0.2, "the engine's processes to end")
        except TimeoutError:
            pass  # `strays` holds the last look: asserted below, once the port is checked
        with (
            socket.socket() as probe
        ):  # SO_REUSEADDR: closed connections may linger, not a listener
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(("127.0.0.1", port))  # raises if anything still listens on it
    finally:
        server.stop()
    assert not strays, [(c.pid, c.name()) for c in strays]
