"""The machine's speed measurement (rlcore/forecast/calibrate.py) is cached only once a run
starts after all its checks: `rl --dry-run`, and a start that a check refuses after its estimate
was measured (`rl`, `rl sft`, `rl eval`), leave the cache folder ($RL_CACHE_DIR) empty.
tests/integration/test_estimate.py shows a run that starts caching it."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import REPO, free_port, tiny_rl_toml

pytestmark = pytest.mark.integration


def rl(cache: Path, *args: str) -> subprocess.CompletedProcess:
    """`rl ARGS` measuring this machine (RL_CALIBRATION unset) with `cache` as its cache."""
    env = {k: v for k, v in os.environ.items() if k != "RL_CALIBRATION"}
    env["RL_CACHE_DIR"] = str(cache)
    command = [sys.executable, "-m", "launcher.rl", *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)


def rl_dry_run(tmp_path: Path, model: Path, cache: Path) -> subprocess.CompletedProcess:
    config = tmp_path / "rl.toml"
    config.write_text(tiny_rl_toml(model, tmp_path / "run", free_port()))
    return rl(cache, "@", str(config), "--dry-run")


def rl_refused(tmp_path: Path, model: Path, cache: Path) -> subprocess.CompletedProcess:
    """An environment that is not installed: refused by the start's checks, after the plan."""
    config = tmp_path / "rl.toml"
    text = tiny_rl_toml(model, tmp_path / "run", free_port())
    config.write_text(text.replace('id = "rl-add-digits"', 'id = "rl-not-installed"'))
    return rl(cache, "@", str(config))


def sft_refused(tmp_path: Path, model: Path, cache: Path) -> subprocess.CompletedProcess:
    """An output folder holding someone's file: refused once the data has been checked."""
    data, out = tmp_path / "d.jsonl", tmp_path / "taken"
    rows = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(8)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    flags = ["--model.name", str(model), "--data.name", str(data), "--output-dir", str(out)]
    return rl(cache, "sft", *flags, "--model.dtype", "float32", "--seq-len", "64")


def eval_refused(tmp_path: Path, model: Path, cache: Path) -> subprocess.CompletedProcess:
    """Its server's port taken by another program: refused as the server would start."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config = tmp_path / "eval.toml"
        config.write_text(
            f'output_dir = "{tmp_path / "eval"}"\nseq_len = 256\n[model]\nname = "{model}"\n'
            '[sampling]\nmax_tokens = 8\n[[eval.env]]\nid = "rl-add-digits"\nnum_examples = 4\n'
            f'[inference]\nmodel = {{ dtype = "float32" }}\nserver = {{ port = {port} }}\n'
        )
        return rl(cache, "eval", "@", str(config))


CASES = {
    "rl --dry-run": (rl_dry_run, 0, "not cached: a dry run writes nothing"),
    "rl refused": (rl_refused, 2, None),  # measured as the plan is built, printed after checks
    "rl sft refused": (sft_refused, 2, "cached once the run starts"),
    "rl eval refused": (eval_refused, 2, "cached once its server is ready"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_start_leaves_the_calibration_cache_empty(tmp_path, tiny_model_dir, case):
    run, code, words = CASES[case]
    cache = tmp_path / "cache"
    cache.mkdir()
    done = run(tmp_path, tiny_model_dir, cache)
    assert done.returncode == code, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    if words is not None:
        assert "(measured now in " in done.stdout and words in done.stdout, done.stdout[-2000:]
    assert list(cache.rglob("*")) == [], f"{case} wrote into the cache folder"
