"""The run-folder guard (rlcore.runs.runguard) between real processes: a separate process holds a
run as `rl` does (exclusively), and `inference`, `evals`, `rl plot` and `rl sft`, each started
as a user starts it, exit 2 with one line naming the folder and the fix, and leave the run
exactly as it was (no admin_token or configs overwritten, no eval.toml, no plot.png). `rl sft`
is also refused a run of another kind (resuming an RL run's checkpoint was the reported case).
The whole matrix runs in-process in tests/unit/rlcore/test_runguard.py."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlcore.runs.ownership import claim
from rlcore.runs.runguard import LAUNCHER_ENV
from tests.integration.helpers import REPO, free_port
from tests.unit.launcher.test_path_promises import snapshot

pytestmark = pytest.mark.integration

HOLD = """
import sys, time
from pathlib import Path
from rlcore.runs.runguard import hold_run
hold_run(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(300)
"""


def env() -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if k != LAUNCHER_ENV}
    found["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "environments")])
    return found


def make_run(root: Path, kind: str, entry: str) -> Path:
    claim(root, kind=kind, entry=entry)
    (root / "configs").mkdir()
    (root / "configs" / "inference.toml").write_text("# the run's own\n")
    (root / "admin_token").write_text("the run's token\n")
    (root / "metrics.jsonl").write_text(json.dumps({"component": "trainer", "step": 1}) + "\n")
    (root / "checkpoints" / "step_1" / "trainer").mkdir(parents=True)
    (root / "checkpoints" / "step_1" / "MANIFEST").write_text("{}\n")
    return root


@pytest.fixture
def held(tmp_path):
    """A function holding a run folder from a separate process, as a running `rl` does."""
    procs: list[subprocess.Popen] = []

    def hold(root: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(root)], env=env(), stdout=subprocess.PIPE, text=True
        )
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def start(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=300
    )


def assert_refused(done: subprocess.CompletedProcess, root: Path, *words: str) -> None:
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and str(root) in err[-1], err[-1]
    for word in words:
        assert word in err[-1], err[-1]


def test_inference_evals_and_rl_plot_refuse_a_run_another_process_holds(
    tmp_path, held, tiny_model_dir
):
    rl_run = make_run(tmp_path / "rl-run", "rl", "rl")
    eval_run = make_run(tmp_path / "eval-run", "eval", "evals")
    (eval_run / "eval.toml").write_text("# the earlier evaluation's\n")
    config = tmp_path / "eval-in.toml"
    config.write_text(f'output_dir = "{eval_run}"\n[[eval.env]]\nid = "rl-add-digits"\n')
    before = snapshot(tmp_path)
    holders = [held(rl_run), held(eval_run)]
    wait = ("is in use by pid", "Wait for it to finish")

    done = start(
        "-m",
        "inference.main",
        "--model.name",
        str(tiny_model_dir),
        "--output-dir",
        str(rl_run),
        "--server.port",
        str(free_port()),
        cwd=tmp_path,
    )
    assert_refused(done, rl_run, f"pid {holders[0].pid}", *wait)
    done = start(
        "-m", "orchestrator.evals.main", "@", str(config), "--run", str(rl_run), cwd=tmp_path
    )
    assert_refused(done, eval_run, f"pid {holders[1].pid}", *wait)
    done = start("-m", "launcher.rl", "plot", str(rl_run), cwd=tmp_path)
    assert_refused(done, rl_run, f"pid {holders[0].pid}", "--out plot.png")
    assert snapshot(tmp_path) == before


def test_rl_sft_refuses_to_resume_an_rl_runs_checkpoint(tmp_path, tiny_model_dir):
    rl_run = make_run(tmp_path / "rl-run", "rl", "rl")
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "completion": "2"}) + "\n")
    before = snapshot(tmp_path)
    done = start(
        "-m",
        "launcher.rl",
        "sft",
        "--model.name",
        str(tiny_model_dir),
        "--data.name",
        str(data),
        "--output-dir",
        str(rl_run),
        "--ckpt.resume-step",
        "-1",
        cwd=tmp_path,
    )
    assert_refused(done, rl_run, "is an rl run (made by `rl`), not an sft run", "--output-dir")
    assert snapshot(tmp_path) == before
