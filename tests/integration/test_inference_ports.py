"""Several runs on one machine (rlcore/processes/ports.py): runs that leave the inference port unset
each get a port of their own, even when they start at once, before any server has bound one; a run
given a port another run has reserved is refused within seconds, before it starts anything,
naming the port, the launcher that holds it and the flag; the reservation dies with its
launcher (`kill -9`), and `inference` started alone respects it too."""

import os
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest

from rlcore.processes import ports
from tests.integration.helpers import (
    MARK_ENV,
    REPO,
    free_port,
    gone_within,
    kill_marked,
    run_state,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration


def unset_port_toml(model_dir: Path, out: Path, max_steps: int) -> str:
    """tiny_rl_toml without its `[inference.server] port`: rl chooses one."""
    text = tiny_rl_toml(model_dir, out, 1, max_steps=max_steps)
    assert "[inference.server]\nport = 1\n" in text
    return text.replace("[inference.server]\nport = 1\n", "")


def test_three_runs_started_at_once_each_get_their_own_port(tiny_model_dir, tmp_path):
    mark = uuid.uuid4().hex
    runs = []
    for i in range(3):
        out, config, log = tmp_path / f"run{i}", tmp_path / f"rl{i}.toml", tmp_path / f"rl{i}.log"
        config.write_text(unset_port_toml(tiny_model_dir, out, max_steps=2))
        runs.append((out, log, start_rl(config, log=log, env={MARK_ENV: mark})))
    try:
        codes = [rl.wait(timeout=900) for _, _, rl in runs]
    finally:
        kill_marked(mark)
    for (_, log, _), code in zip(runs, codes, strict=True):
        assert code == 0, log.read_text()[-4000:]
    taken = [run_state(out)["inference_ports"]["inference"] for out, _, _ in runs]
    assert len(set(taken)) == 3, taken
    print(f"three runs at once: ports {taken}, exit codes {codes}")
    for (out, log, _), port in zip(runs, taken, strict=True):
        text = log.read_text()
        assert f"Inference: http://127.0.0.1:{port} (inference.server.port unset: " in text
        assert run_state(out)["inference_urls"] == [f"http://127.0.0.1:{port}"]
        served = tomllib.loads((out / "configs" / "inference.toml").read_text())
        assert served["server"]["port"] == port
        kept = tomllib.loads((out / "configs" / "rl.toml").read_text())
        assert kept["inference"]["server"]["port"] == "None"  # a resume chooses again


def test_a_reserved_explicit_port_is_refused_at_once_and_the_reservation_dies_with_rl(
    tiny_model_dir, tmp_path
):
    port = free_port()
    first_mark, second_mark = uuid.uuid4().hex, uuid.uuid4().hex
    first_config, second_config = tmp_path / "first.toml", tmp_path / "second.toml"
    first_config.write_text(tiny_rl_toml(tiny_model_dir, tmp_path / "first", port, max_steps=2))
    second_out = tmp_path / "second"
    second_config.write_text(tiny_rl_toml(tiny_model_dir, second_out, port, max_steps=2))
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first_started = time.monotonic()
    first = start_rl(first_config, log=first_log, env={MARK_ENV: first_mark})
    try:
        wait_for(
            lambda: "reserved for this run" in first_log.read_text(),
            120,
            "the first run's reservation",
            proc=first,
            log=first_log,
        )
        time.sleep(max(0.0, first_started + 2 - time.monotonic()))  # 2 s apart (or more)
        started = time.monotonic()
        second = start_rl(second_config, log=second_log, env={MARK_ENV: second_mark})
        code = second.wait(timeout=60)
        second_s = time.monotonic() - started
        assert gone_within(second_mark, 5) < 5
        assert ports.port_problem("127.0.0.1", port) is None, "the first server bound it already"
        text = second_log.read_text()
        assert code == 2, text
        assert second_s < 5, f"{second_s:.1f} s: {text}"
        assert f"port {port} on 127.0.0.1 is reserved by another run's launcher, " in text
        assert f"pid {first.pid} (" in text and "--inference.server.port" in text
        assert "started inference" not in text and not second_out.exists()
        print(f"the second run exited 2 in {second_s:.1f} s")
        alone = inference_alone(tiny_model_dir, tmp_path, port)
        assert alone.returncode == 2 and "reserved by another run's launcher" in alone.stderr
        assert first.poll() is None, "the first run was disturbed"
        first.kill()  # kill -9: its reservation goes with it, at once
        first.wait(timeout=30)
        wait_for(lambda: not ports.reserved_elsewhere(port), 2, "the reservation to go")
    finally:
        kill_marked(first_mark)
        kill_marked(second_mark)


def inference_alone(model_dir: Path, tmp_path: Path, port: int) -> subprocess.CompletedProcess:
    """`inference` started alone on `port`: refused before vLLM loads."""
    cmd = [
        sys.executable,
        "-m",
        "inference.main",
        "--model.name",
        str(model_dir),
        "--server.port",
        str(port),
        "--output-dir",
        str(tmp_path / "alone"),
    ]
    env = {k: v for k, v in os.environ.items() if k != ports.HELD_ENV}
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)


def test_evals_refuses_a_taken_port_for_its_own_server_before_starting_it(tiny_model_dir, tmp_path):
    out = tmp_path / "eval"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = tmp_path / "eval.toml"
        config.write_text(
            f'output_dir = "{out}"\nseq_len = 256\n[model]\nname = "{tiny_model_dir}"\n'
            '[[eval.env]]\nid = "rl-add-digits"\nnum_examples = 2\n'
            f"[inference]\nserver = {{ port = {port} }}\n"
        )
        cmd = [sys.executable, "-m", "launcher.rl", "eval", "@", str(config)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert f"port {port} on 127.0.0.1 is in use" in done.stderr
    assert f"pid {os.getpid()}" in done.stderr and "--inference.server.port" in done.stderr
    assert not (out / "inference.log").exists()  # no server was started
