"""The estimate on a real tiny run: printed before the start, the machine's new measurement
cached as the run starts, the time left on every progress line reaching zero at the end,
run.json holding the estimate beside the measured totals, and the run's answers kept for the
next estimate of the same job, which says it took them."""

import json
import os
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO, free_port, start_rl, tiny_rl_toml

pytestmark = pytest.mark.integration


def test_a_tiny_runs_time_left_reaches_zero_and_run_json_holds_both(tmp_path, tiny_model_dir):
    out, config, log = tmp_path / "run", tmp_path / "rl.toml", tmp_path / "rl.log"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=4))
    cache = tmp_path / "cache"  # this machine measured anew, and cached as the run starts
    rl = start_rl(config, log=log, env={"RL_CACHE_DIR": str(cache)})
    assert rl.wait(timeout=600) == 0, log.read_text()[-3000:]
    text = log.read_text()
    assert "Estimate (from the model's shape" in text and "  run: ~" in text
    assert "; cached once the run starts; " in text
    assert len(list((cache / "calibration").glob("*.json"))) == 1
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if line.startswith("[")]
    assert len(lines) == 4 and all(" | left ~" in line for line in lines), lines
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "finished"
    assert state["progress"]["time_left_s"] == 0.0
    assert state["estimate"]["wall_s"] > 0 and state["measured"]["wall_s"] > 0
    assert state["measured"]["disk_bytes"] > 0
    assert {"trainer", "inference", "orchestrator"} <= set(state["measured"]["peak_memory_bytes"])
    assert {"wall", "disk", "memory trainer"} <= set(state["estimate_accuracy"])
    assert "rl: estimated " in text and "measured / estimated" in text
    status = subprocess.run(
        [sys.executable, "-m", "launcher.rl", "status", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert "time:         estimated " in status.stdout
    first = [line for line in text.splitlines() if "basis: answers:" in line]
    assert first and "none measured yet" in first[0] and "an upper bound" in first[0], first
    kept = list((cache / "answers").glob("*.json"))
    assert len(kept) == 1, kept
    record = json.loads(kept[0].read_text())
    assert record["rollouts"] > 0 and record["turns"][0]["share"] == 1.0
    again = subprocess.run(
        [sys.executable, "-m", "launcher.rl", "@", str(config), "--dry-run"]
        + ["--output-dir", str(tmp_path / "again")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "RL_CACHE_DIR": str(cache)},
    )
    assert again.returncode == 0, again.stderr
    assert "basis: answers: as the last finished run of this model" in again.stdout


def test_an_estimate_that_cannot_be_made_says_why_and_the_dry_run_goes_on(tmp_path):
    out = tmp_path / "run"
    dry = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher.rl",
            "--model.name",
            "some-org/unknown-model",
            "--output-dir",
            str(out),
            "--dry-run",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0, dry.stderr
    assert "Estimate: not made (no local folder for 'some-org/unknown-model'" in dry.stdout
    assert "Traceback" not in dry.stdout + dry.stderr
