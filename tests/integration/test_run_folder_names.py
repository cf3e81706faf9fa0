"""`rl status`, `list` and `plot` on a run whose folder name is not UTF-8 (a name read back from
disk is data too): a real `rl` process under a UTF-8 locale prints it escaped, never a
UnicodeEncodeError traceback, and `rl plot` titles its figure with it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.runs.rundir import RunDir

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_a_run_folder_name_that_is_not_utf8_is_printed_escaped(tmp_path):
    parent = tmp_path / os.fsdecode(b"runs-\xff")
    run = RunDir(parent / "run")
    run.claim()
    run.append_metrics("trainer", 1, {"loss": 0.5})
    run.run_json.write_text(json.dumps({"status": "finished"}))
    env = {**os.environ, "LC_ALL": "C.UTF-8", "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(REPO)}
    for args in (
        ["status", str(run.root)],
        ["list", str(parent)],
        ["plot", str(run.root), "--out", str(tmp_path / "p.png")],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "launcher.rl", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert args[0] == "plot" or "runs-\\udcff" in done.stdout, done.stdout
