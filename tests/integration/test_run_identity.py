"""Identity before action: `rl stop`, `rl status` and `rl list` act on a pid from run.json only
when it is proved to be the run's own process (rlcore.processes.procs.verify): the recorded start
time and command line, and for the launcher the run's lock. A stranger is a real `sleep` process
that run.json names in the ways a stale, copied or hand-edited run.json can; after `rl stop` it
must still be alive, and the output must say why nothing was signalled. A stand-in launcher (the
real Supervisor starting `sleep` children) is the process that must verify, and be stopped."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from launcher.commands import run_command
from rlcore.runs.rundir import RunDir

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def rl(*args: str) -> subprocess.CompletedProcess:
    code = "import sys; from launcher.rl import main; main(sys.argv[1:])"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=150
    )


def start_reaped(command: list[str]) -> subprocess.Popen:
    """A child whose exit is reaped at once (a signalled one does not linger as a zombie)."""
    proc = subprocess.Popen(command)
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


@pytest.fixture
def stranger():
    """A process that has nothing to do with any run."""
    proc = start_reaped(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def alive(proc: subprocess.Popen) -> bool:
    time.sleep(0.2)  # a signal, had one been sent, has been delivered and the exit reaped
    return proc.poll() is None


def marked_run(root: Path, state: dict) -> RunDir:
    run = RunDir(root)
    run.claim()
    run.run_json.write_text(json.dumps(state))
    return run


def record_of(pid: int, **changes) -> dict:
    from rlcore.processes.procs import identity

    record = identity(pid)
    assert record is not None
    return {**record, **changes}


def dead_pid_record() -> dict:
    proc = subprocess.Popen(["sleep", "60"])
    record = record_of(proc.pid)
    proc.kill()
    proc.wait()
    return record


def legacy(pid: int) -> dict:
    """run.json as an older rl wrote it: pids only."""
    return {"status": "running", "launcher_pid": pid}


def with_launcher(record: dict, status: str = "running") -> dict:
    return {"status": status, "launcher_pid": record["pid"], "identities": {"launcher": record}}


STOP_CASES = {
    "older run.json": (lambda pid: legacy(pid), "no identity"),
    "pid reused": (lambda pid: with_launcher(record_of(pid, create_time=1e9)), "started at"),
    "other command": (
        lambda pid: with_launcher(record_of(pid, cmdline_sha256="0123456789abcdef")),
        "command line",
    ),
    "lock not held": (lambda pid: with_launcher(record_of(pid)), "lock"),
    "finished run": (
        lambda pid: with_launcher(record_of(pid, create_time=1e9), status="finished"),
        "the run recorded",
    ),
    "dead pid": (lambda pid: with_launcher(dead_pid_record()), "is not running"),
}


@pytest.mark.parametrize("case", STOP_CASES)
def test_stop_signals_nothing_that_is_not_the_runs_launcher(tmp_path, stranger, capsys, case):
    make_state, why = STOP_CASES[case]
    state = make_state(stranger.pid)
    run = marked_run(tmp_path / "run", state)
    assert run_command("stop", [str(run.root)]) == 0
    out = capsys.readouterr().out
    assert alive(stranger), out
    assert f"pid {state['launcher_pid']}" in out and why in out, out
    assert "nothing signalled" in out and "nothing to stop" in out, out


def test_stop_refuses_a_folder_without_the_run_marker(tmp_path, stranger, capsys):
    folder = tmp_path / "copied"
    folder.mkdir()
    (folder / "run.json").write_text(
        json.dumps({"status": "finished", "launcher_pid": stranger.pid})
    )
    assert run_command("stop", [str(folder)]) == 2
    err = capsys.readouterr().err
    assert alive(stranger), err
    assert "is not a run" in err and ".rl-run" in err and "nothing signalled" in err, err


HOLD = """
import sys, time
from pathlib import Path
from rlcore.runs.runguard import hold_run
hold_run(Path(sys.argv[1]))
print("held", flush=True)
time.sleep(60)
"""


def test_stop_names_the_holder_of_a_run_whose_launcher_it_cannot_prove(tmp_path, stranger, capsys):
    run = marked_run(tmp_path / "run", legacy(stranger.pid))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run.root)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert run_command("stop", [str(run.root)]) == 1
        out = capsys.readouterr().out
        assert alive(stranger) and holder.poll() is None, out
        assert f"pid {stranger.pid}" in out and f"pid {holder.pid}" in out, out
        assert "exclusive lock" in out and "nothing signalled" in out, out
    finally:
        holder.kill()
        holder.wait()


def test_status_and_list_do_not_report_a_stranger_as_the_run(tmp_path, stranger, capsys):
    pid = stranger.pid
    reused, other = record_of(pid, create_time=1e9), record_of(pid, cmdline_sha256="0" * 16)
    state = {
        "status": "running",
        "launcher_pid": pid,
        "pids": {"trainer": pid, "orchestrator": pid, "inference": pid},
        "identities": {"launcher": reused, "trainer": reused, "inference": other},
    }
    run = marked_run(tmp_path / "runs" / "r", state)
    assert run_command("status", [str(run.root)]) == 0
    out = capsys.readouterr().out
    lines = {line.split(":")[0]: line for line in out.splitlines()}
    assert "launcher running" not in lines["status"], out
    assert f"pid {pid} is not this run's launcher" in lines["launcher"], out
    assert f"pid {pid} is not this run's trainer: it started at" in lines["trainer"], out
    assert "command line" in lines["inference"], out
    assert "no identity" in lines["orchestrator"], out
    assert not any(
        line.split(":", 1)[1].strip().startswith("running")
        for line in (lines["launcher"], lines["trainer"], lines["orchestrator"], lines["inference"])
    ), out

    assert run_command("list", [str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith(str(run.root)))
    assert row.split()[1] == "dead", out
    assert f"pid {pid} is not this run's launcher: it started at" in out, out
    assert alive(stranger)


STAND_IN = """
import sys
from pathlib import Path
from launcher.launch import attempt_spec
from launcher.plan import Plan
from launcher.rl_config import RLConfig
from launcher.supervisor import Supervisor
from rlcore.processes.poll import Stop, ignore_stop_signals, install_stop_handlers, sleep
from rlcore.runs.runguard import hold_run

given = {"output_dir": sys.argv[1], "inference": {"server": {"port": 8000}}}  # as rl settles it
plan = Plan(RLConfig.model_validate(given),
            gpu_map={"inference": [], "orchestrator": [], "trainer": []}, attempt="a1")
plan.command = lambda name: ["sleep", "60"]
plan.run.claim()
hold_run(plan.run.root)
supervisor = Supervisor(attempt_spec(plan))
install_stop_handlers()
try:
    for name in plan.components:
        supervisor.start(name)
    supervisor.write_state("running")
    print("running", flush=True)
    sleep(60)
except Stop as stop:
    ignore_stop_signals("rl")
    supervisor.stop_all(5)
    supervisor.write_state("stopped", signal=stop.signum)
    sys.exit(143)
"""


def test_the_launcher_records_every_process_and_rl_stop_stops_it(tmp_path, stranger, capsys):
    root = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(root)],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert launcher.stdout.readline().strip() == "running"
        state = json.loads((root / "run.json").read_text())
        names = ["launcher", "inference", "orchestrator", "trainer"]
        assert sorted(state["identities"]) == sorted(names), state
        pids = {"launcher": launcher.pid, **state["pids"]}
        assert {n: state["identities"][n]["pid"] for n in names} == pids, state

        assert run_command("status", [str(root)]) == 0
        out = capsys.readouterr().out
        lines = {line.split(":")[0]: line for line in out.splitlines()}
        assert "(launcher running)" in lines["status"], out
        for name in names:
            assert f"running (pid {pids[name]})" in lines[name], out

        stop = rl("stop", str(root))  # a separate process, as a user's `rl stop` is
        assert stop.returncode == 0 and f"stopped the run in {root}" in stop.stdout, stop
        assert launcher.wait(timeout=30) == 143
        children = [pids[n] for n in names[1:]]
        assert not [p for p in children if psutil.pid_exists(p)], children
        assert json.loads((root / "run.json").read_text())["status"] == "stopped"
        assert alive(stranger)
    finally:
        for child in psutil.Process(launcher.pid).children() if launcher.poll() is None else []:
            child.kill()
        launcher.kill()
        launcher.wait()


SFT_STAND_IN = """
import sys
from pathlib import Path
from launcher import sft_run
from launcher.eta import RunClock
from trainer.sft.config import SFTConfig

config = SFTConfig.model_validate({"output_dir": sys.argv[1], "data": {"name": "rows.jsonl"}})
SLEEP = "import time; print('started', flush=True); time.sleep(60)"
sft_run.sft_command = lambda config_file: [sys.executable, "-c", SLEEP]
run = sft_run.RunDir(config.output_dir)
step = sft_run.prepare(run, config, clean=False)
clock = RunClock(None, config.max_steps, ["sft"])
sys.exit(sft_run.exit_code(sft_run.run_attempt(run, config, step, clock)))
"""


def test_rl_sft_records_itself_and_its_child_and_rl_stop_stops_it(tmp_path, capsys):
    root = tmp_path / "sft-run"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    launcher = subprocess.Popen(
        [sys.executable, "-c", SFT_STAND_IN, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert launcher.stdout.readline().strip() == "started"
        state = json.loads((root / "run.json").read_text())
        assert state["status"] == "running" and sorted(state["identities"]) == ["launcher", "sft"]
        sft = state["pids"]["sft"]
        assert run_command("status", [str(root)]) == 0
        lines = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines()}
        assert f"running (pid {launcher.pid})" in lines["launcher"], lines
        assert f"running (pid {sft})" in lines["sft"], lines
        stop = rl("stop", str(root))
        assert stop.returncode == 0 and f"stopped the run in {root}" in stop.stdout, stop
        assert launcher.wait(timeout=60) == 143 and not psutil.pid_exists(sft)
        assert json.loads((root / "run.json").read_text())["status"] == "stopped"
    finally:
        launcher.kill()
        launcher.wait()


def test_rl_sft_says_a_killed_child_and_status_and_logs_show_its_processes(tmp_path, capsys):
    """An `rl sft` run has a launcher and `sft`, no trainer, orchestrator or inference; its
    log is `logs/sft.log`; a SIGKILLed `sft` is named as `rl` names kills (it said "exited
    with -9")."""
    root = tmp_path / "sft-run"
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
    launcher = subprocess.Popen(
        [sys.executable, "-c", SFT_STAND_IN, str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert launcher.stdout.readline().strip() == "started"
        sft = json.loads((root / "run.json").read_text())["pids"]["sft"]
        assert run_command("status", [str(root)]) == 0
        shown = [line.split(":")[0] for line in capsys.readouterr().out.splitlines()]
        assert shown == ["run", "status", "launcher", "sft", "checkpoint", "disk use"], shown
        assert run_command("logs", [str(root)]) == 0
        assert "[sft] started" in capsys.readouterr().out
        psutil.Process(sft).kill()
        _, err = launcher.communicate(timeout=60)
        assert "rl sft: error: sft was killed (SIGKILL)" in err, err
        assert launcher.returncode == 1  # as rl ends for a killed component (was 247)
        state = json.loads((root / "run.json").read_text())
        assert state["status"] == "failed" and state["exit_code"] == -9
    finally:
        launcher.kill()
        launcher.wait()
