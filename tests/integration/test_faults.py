"""Fault matrix on the real launcher: SIGKILL to each component at three moments, signals to
`rl`, and each time: `rl` exits non-zero in bounded time naming the component, no process of the
run survives, the latest complete checkpoint loads, and `--ckpt.resume-step -1` finishes.

Every case runs on each setup: both weight transports, two inference replicas, and LoRA (whose
adapters travel through the filesystem)."""

import os
import signal
import time
from pathlib import Path

import pytest

from rlcore.contracts import collective
from rlcore.faults import CKPT_SAVE_DELAY_ENV  # the trainer pauses inside a save
from rlcore.runs.rundir import RunDir
from tests.integration.helpers import (
    free_port,
    kill_sessions,
    run_state,
    session_members,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration
# The default test run keeps one case (a LoRA run: the filesystem transport's resume, with
# adapters); tests/integration/test_rl.py's default restart case kills on the collective one.
# `pytest -m slow` runs the whole matrix.
IN_DEFAULT_RUN = {("lora", "trainer", "between_checkpoints")}
SETUPS = {
    "filesystem": ("--weight-transfer.type", "filesystem"),
    "collective": ("--weight-transfer.type", "collective"),
    "two-replicas": ("--weight-transfer.type", "collective", "--inference.replicas", "2"),
    "lora": ("--weight-transfer.type", "filesystem"),
}
LORA = "[trainer.lora]\nrank = 8\nalpha = 16.0\n"

MAX_STEPS = 4
EXIT_WITHIN_S = 90


def trainer_saving(run: RunDir) -> bool:
    part = run.checkpoint_dir(2) / "trainer"
    return part.is_dir() and not (part / "DONE").exists()


def published(run: RunDir, step: int) -> bool:
    """Whether the trainer has published policy `step` (it does so before it checkpoints that
    step): a STABLE folder, or the collective transport's offer."""
    offer = collective.read_offer(run.transfer) or {}
    return run.weights_stable(step) or offer.get("step", -1) >= step


MOMENTS = {
    "before_first_checkpoint": lambda run: run.metrics.exists() and run.latest_checkpoint() is None,
    "during_checkpoint_save": trainer_saving,
    "between_checkpoints": lambda run: run.latest_checkpoint() == 2 and not published(run, 4),
}


def start(tmp_path: Path, setup: str, *flags: str, log: str, delay_s: float = 0.0):
    out = tmp_path / "run"
    config = tmp_path / "rl.toml"
    if not config.exists():
        text = tiny_rl_toml(Path(os.environ["TINY_MODEL"]), out, free_port(), MAX_STEPS)
        text = text.replace("interval = 1", "interval = 2")
        config.write_text(text + (LORA if setup == "lora" else ""))
    os.environ[CKPT_SAVE_DELAY_ENV] = str(delay_s)
    try:
        return start_rl(config, *SETUPS[setup], *flags, log=tmp_path / log), RunDir(out)
    finally:
        os.environ.pop(CKPT_SAVE_DELAY_ENV)


def sessions_of(rl_pid: int, run: RunDir) -> set[int]:
    return {rl_pid, *run_state(run.root).get("pids", {}).values()}


def assert_stops_cleanly(rl, run: RunDir, log: Path, words: list[str]) -> None:
    sessions = sessions_of(rl.pid, run)
    started = time.monotonic()
    code = rl.wait(timeout=EXIT_WITHIN_S)
    text = log.read_text()
    assert code != 0, text
    assert time.monotonic() - started < EXIT_WITHIN_S
    assert all(word in text for word in words), text
    wait_for(lambda: not session_members(sessions), 30, "every process of the run to exit")


def resume_and_finish(tmp_path: Path, setup: str, expected_from: int | None) -> None:
    rl, run = start(tmp_path, setup, "--ckpt.resume-step", "-1", log="resume.log")
    try:
        code = rl.wait(timeout=900)
        text = (tmp_path / "resume.log").read_text()
        assert code == 0, text
        assert f"resuming from step {expected_from}" in text if expected_from else "fresh" in text
    finally:
        kill_sessions(sessions_of(rl.pid, run))
    assert run.latest_checkpoint() == MAX_STEPS
    if SETUPS[setup][1] == "filesystem":
        assert run.weights_stable(MAX_STEPS)


@pytest.fixture(autouse=True)
def tiny_model_env(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("TINY_MODEL", str(tiny_model_dir))


def matrix() -> list:
    cases = []
    for setup in SETUPS:
        for component in ("inference", "orchestrator", "trainer"):
            for moment in MOMENTS:
                case = (setup, component, moment)
                slow = () if case in IN_DEFAULT_RUN else (pytest.mark.slow,)
                cases.append(pytest.param(*case, marks=slow, id="-".join(case)))
    return cases


@pytest.mark.parametrize(("setup", "component", "moment"), matrix())
def test_sigkill_component(tmp_path, setup, component, moment):
    delay = 10.0 if moment == "during_checkpoint_save" else 0.0  # the kill lands within it
    rl, run = start(tmp_path, setup, log="first.log", delay_s=delay)
    try:
        wait_for(
            lambda: MOMENTS[moment](run),
            600,
            f"the moment {moment}",
            interval_s=0.1,
            proc=rl,
            log=tmp_path / "first.log",
        )
        latest_before = run.latest_checkpoint()
        os.kill(run_state(run.root)["pids"][component], signal.SIGKILL)
        said = [f"rl: error: {component} was killed (SIGKILL)", "stopped the other components."]
        assert_stops_cleanly(rl, run, tmp_path / "first.log", said)
    finally:
        kill_sessions(sessions_of(rl.pid, run))
    # No checkpoint lost, none counted without every part; one whose last part was being
    # written when the kill came (the orchestrator runs ahead of the trainer) may complete.
    latest = run.latest_checkpoint()
    assert (latest or 0) >= (latest_before or 0)
    if latest is not None:
        assert all(run.part_done(latest, part) for part in ("trainer", "orchestrator"))
    if moment == "during_checkpoint_save":
        assert not run.checkpoint_complete(2)
    resume_and_finish(tmp_path, setup, latest)


SIGNAL_IN_DEFAULT_RUN = None  # all slow; test_rl.py's SIGTERM case is in the default run
SIGNALS = {
    "SIGINT": [signal.SIGINT],
    "SIGTERM": [signal.SIGTERM],
    "SIGHUP": [signal.SIGHUP],
    "SIGINT-twice": [signal.SIGINT] * 2,
}


@pytest.mark.parametrize(
    ("setup", "signals"),
    [
        pytest.param(
            setup,
            SIGNALS[name],
            id=f"{setup}-{name}",
            marks=() if (setup, name) == SIGNAL_IN_DEFAULT_RUN else pytest.mark.slow,
        )
        for setup in SETUPS
        for name in SIGNALS
    ],
)
def test_signals_to_rl(tmp_path, setup, signals):
    rl, run = start(tmp_path, setup, log="first.log")
    try:
        wait_for(
            lambda: run.metrics.exists(),
            600,
            "the first step",
            proc=rl,
            log=tmp_path / "first.log",
        )
        for sig in signals:
            rl.send_signal(sig)
            time.sleep(0.3)
        said = [f"rl: got {signals[0].name}, stopping all components"]
        assert_stops_cleanly(rl, run, tmp_path / "first.log", said)
        assert run_state(run.root)["status"] == "stopped"
    finally:
        kill_sessions(sessions_of(rl.pid, run))
    resume_and_finish(tmp_path, setup, run.latest_checkpoint())
