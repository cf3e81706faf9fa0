"""`rl --weight-transfer.type collective` on CPU with the tiny model: on-policy parity at every
step with no policy folders written, two inference replicas in one group (slow), and a killed
inference server ending the run with a clear error, not a hang."""

import json
import os
import re
import signal
from pathlib import Path

import pytest

from tests.integration.helpers import (
    free_ports,
    kill_sessions,
    run_state,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

# Slow: an `rl` run each; test_rl.py's default restart case runs the collective transport.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


def run_collective(tmp_path: Path, model: Path, *flags: str, max_steps: int = 4):
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    port = free_ports(2)  # two replicas listen on port and port + 1
    config.write_text(tiny_rl_toml(model, out, port, max_steps=max_steps))
    log = tmp_path / "rl.log"
    rl = start_rl(config, "--weight-transfer.type", "collective", *flags, log=log)
    return rl, out, log


def trainer_records(out: Path) -> list[dict]:
    lines = (out / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["component"] == "trainer"]


def check_on_policy_run(rl, out: Path, log: Path) -> None:
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    assert code == 0, log.read_text()
    records = trainer_records(out)
    kls = [r["mismatch_kl"] for r in records]
    sent = [r["step"] for r in records if r.get("transfer_send_s", 0) > 0]
    print(f"mismatch_kl per step {kls}; policies sent after steps {sent}")
    assert len(kls) == 4 and max(kls) <= 1e-3, kls
    assert sent, "no policy was sent"
    assert "now serving step_1" in (out / "logs" / "inference.log").read_text()
    weights = out / "weights"
    assert not (weights.exists() and [p for p in weights.iterdir() if p.name.startswith("step_")])


def test_rl_collective_on_policy(tiny_model_dir, tmp_path):
    rl, out, log = run_collective(tmp_path, tiny_model_dir)
    check_on_policy_run(rl, out, log)


def test_rl_collective_two_replicas(tiny_model_dir, tmp_path):
    rl, out, log = run_collective(
        tmp_path, tiny_model_dir, "--inference.replicas", "2", "--async-level", "0"
    )
    check_on_policy_run(rl, out, log)
    for name in ("inference", "inference-1"):
        text = (out / "logs" / f"{name}.log").read_text()
        assert "now serving step_1" in text, text[-2000:]


def test_rl_collective_inference_killed_is_a_clear_error(tiny_model_dir, tmp_path):
    rl, out, log = run_collective(tmp_path, tiny_model_dir, max_steps=50)
    try:
        wait_for(
            lambda: (
                any(r.get("transfer_send_s", 0) > 0 for r in trainer_records(out))
                if (out / "metrics.jsonl").exists()
                else False
            ),
            600,
            "a first collective update",
            proc=rl,
            log=log,
        )
        os.kill(run_state(out)["pids"]["inference"], signal.SIGKILL)
        code = rl.wait(timeout=300)
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    text = log.read_text()
    assert code != 0, text
    assert re.search(r"rl: error: inference (was killed|exited)", text), text[-3000:]
