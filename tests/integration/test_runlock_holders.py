"""One live launcher per run folder: `rl` locks the marker exclusively, components started alone
share it with each other but never with an `rl`, `rl`'s own children take no lock, and a lock
dies with its process. Each holder is a real separate process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import LAUNCHER_ENV

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TRY = """
import sys, time
from pathlib import Path
from rlcore.errors import ConfigError
from rlcore.runs.runguard import hold_run, join_run
root, how = Path(sys.argv[-2]), sys.argv[-1]
try:
    join_run(root) if how == "join" else hold_run(root)
except ConfigError as err:
    print("refused:", err, flush=True)
    sys.exit(2)
print("held", flush=True)
time.sleep(120)
"""


def attempt(root: Path, how: str, under_rl: bool = False, flags=()) -> subprocess.Popen:
    """A process that tries to `hold` (as rl) or `join` (as a component) the run; it answers
    on its first line and, when it got the lock, keeps it until killed. `flags` come first on
    its command line (`python try.py FLAGS... ROOT HOW`, run in ROOT's parent)."""
    env = {k: v for k, v in os.environ.items() if k != LAUNCHER_ENV}
    env["PYTHONPATH"] = str(REPO)
    if under_rl:
        env[LAUNCHER_ENV] = "1"
    (root.parent / "try.py").write_text(TRY)
    return subprocess.Popen(
        [sys.executable, "try.py", *flags, str(root), how],
        env=env,
        cwd=root.parent,
        stdout=subprocess.PIPE,
        text=True,
    )


def answer(proc: subprocess.Popen) -> str:
    return proc.stdout.readline().strip()


@pytest.fixture
def run_root(tmp_path):
    root = tmp_path / "run"
    RunDir(root).claim()
    procs: list[subprocess.Popen] = []
    yield root, procs
    for proc in procs:
        proc.kill()
        proc.wait()


def start(procs, root, how, under_rl=False, flags=()) -> str:
    proc = attempt(root, how, under_rl, flags)
    procs.append(proc)
    return answer(proc)


def test_a_held_run_refuses_rl_and_components_and_names_the_folder(run_root):
    root, procs = run_root
    assert start(procs, root, "hold") == "held"
    refused = start(procs, root, "hold")
    assert refused.startswith("refused:") and str(root) in refused and "--output-dir" in refused
    assert start(procs, root, "join").startswith("refused:")


def test_components_alone_share_a_run_but_keep_rl_out(run_root):
    root, procs = run_root
    assert start(procs, root, "join") == "held"
    assert start(procs, root, "join") == "held"
    assert start(procs, root, "hold").startswith("refused:")


def test_rl_children_take_no_lock(run_root):
    root, procs = run_root
    assert start(procs, root, "hold") == "held"
    assert start(procs, root, "join", under_rl=True) == "held"


def test_the_lock_dies_with_its_holder(run_root):
    root, procs = run_root
    assert start(procs, root, "hold") == "held"
    procs[0].kill()
    procs[0].wait()
    assert start(procs, root, "hold") == "held"


def test_a_refusal_names_the_holder_without_the_secrets_on_its_command_line(run_root):
    root, procs = run_root
    secret = "sk-live-0123456789abcdef"
    assert start(procs, root, "hold", flags=["--wandb-api-key", secret]) == "held"
    refused = start(procs, root, "hold")
    assert "try.py --wandb-api-key *** " in refused and secret not in refused, refused
