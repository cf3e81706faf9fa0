"""`--deterministic`: a run is a pure function of its configs, seed and data. Two runs of the
tiny job give the same numbers bit for bit, and a run resumed from a checkpoint (by hand with
`--ckpt.resume-step -1`, or by `--max-restarts` after a kill) equals the uninterrupted run from
the checkpoint on, on both weight transports and at async levels 0 and 1.

The job trains on `rl-text-hash` (tests/integration/envs): a random tiny model never answers a
sum right, so `rl-add-digits` would give zero advantages and nothing to compare; this reward
differs for any two answers, so every step trains and every sampled token shows."""

import hashlib
import json
import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers import (
    assert_archive_holds_every_step,
    assert_finished_every_step,
    free_port,
    kill_sessions,
    run_state,
    session_members,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

from launcher.exits import oom_kills
from rlcore.contracts import samples_store
from rlcore.runs.rundir import RunDir

pytestmark = pytest.mark.integration

ENVS = Path(__file__).parent / "envs"
COMPARED = {
    "trainer": ("loss", "entropy", "mismatch_kl", "grad_norm", "num_tokens"),
    "orchestrator": (
        "reward",
        "num_tokens",
        "completion_len",
        "policy_step",
        "tokens_digest",
        "logprobs_digest",
    ),
}


def env_with_test_envs() -> dict[str, str]:
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": str(ENVS) + (os.pathsep + path if path else "")}


def det_job(
    tmp_path: Path, model: Path, name: str, transport: str = "filesystem", async_level: int = 1
) -> tuple[Path, Path, tuple[str, ...]]:
    """(config, run folder, flags) of the tiny 4-step job, checkpointing every step."""
    out, config = tmp_path / name, tmp_path / f"{name}.toml"
    text = tiny_rl_toml(model, out, free_port(), max_steps=4)
    text = text.replace('id = "rl-add-digits"', 'id = "rl-text-hash"')
    config.write_text(text.replace("async_level = 1", f"async_level = {async_level}"))
    return config, out, ("--deterministic", "--weight-transfer.type", transport)


def run_to_end(config: Path, out: Path, flags: tuple[str, ...], log: Path) -> None:
    rl = start_rl(config, *flags, log=log, env=env_with_test_envs())
    try:
        code = rl.wait(timeout=900)
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    assert code == 0, log.read_text()[-3000:]


def numbers(out: Path) -> dict[tuple[str, int], dict]:
    """The compared metrics of each (component, step): the last record of each, as a resumed
    run's records follow those of the attempt it replaced."""
    found = {}
    for line in (out / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        keys = COMPARED.get(record["component"])
        is_training = record["component"] == "trainer" or "reward" in record  # not an eval
        if keys and is_training:
            found[(record["component"], record["step"])] = {k: record.get(k) for k in keys}
    return found


def state_hash(out: Path, step: int) -> str:
    """The trainer's model and optimizer state in checkpoint `step` (what the collective
    transport leaves on disk: it writes no weights folders)."""
    files = sorted((out / "checkpoints" / f"step_{step}" / "trainer").rglob("*.distcp"))
    assert files, f"no trainer checkpoint at step {step} in {out}"
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def test_two_runs_and_a_restarted_one_give_the_same_numbers(tiny_model_dir, tmp_path):
    """The quick start's transport and async level: a whole run, and a second one at the same
    time whose trainer is killed (SIGKILL) right after its second checkpoint and restarted by
    --max-restarts 1, agree at every step (the second run's first steps come from before the
    kill, the rest from the restarted attempt). It is also the default run's restart after a
    kill (test_rl.py's matrix is slow; test_faults.py's default case resumes by hand): rl names
    the kill and its cause, restarts once from a checkpoint at or after the one seen, and
    finishes every step with every batch from a policy inference swapped in."""
    config, whole, flags = det_job(tmp_path, tiny_model_dir, "whole", "collective")
    config2, cut, _ = det_job(tmp_path, tiny_model_dir, "cut", "collective")
    # The two runs go at once: their numbers must not depend on what else the machine does.
    with ThreadPoolExecutor(1) as pool:
        uninterrupted = pool.submit(run_to_end, config, whole, flags, tmp_path / "whole.log")
        step = interrupt(config2, cut, flags, "restart", tmp_path / "cut.log")
        uninterrupted.result()
    text = (tmp_path / "cut.log").read_text()
    assert "rl: error: trainer was killed (SIGKILL)" in text and "(restart 1 of 1)" in text, text
    if oom_kills() is not None:  # the test killed it, and the cgroup's OOM count says so
        assert "trainer was killed (SIGKILL) by another process or a user" in text, text
    assert_finished_every_step(RunDir(cut), "collective")
    first, second = numbers(whole), numbers(cut)
    assert step >= 2 and len(first) == 8 and first == second
    rewards = {first[("orchestrator", step)]["reward"] for step in range(4)}
    assert len(rewards) > 1 and all(first[("trainer", s)]["grad_norm"] > 0 for s in range(1, 5))
    assert all(first[("orchestrator", s)]["logprobs_digest"] for s in range(4))
    assert state_hash(whole, 4) == state_hash(cut, 4)
    # every rollout kept readable, the restarted attempt's regenerated steps alike
    assert_archive_holds_every_step(RunDir(cut))
    for step in range(4):
        rows = [
            samples_store.read_step(
                samples_store.step_file(RunDir(folder).samples, step)
            ).to_pylist()
            for folder in (whole, cut)
        ]
        assert rows[0] == rows[1], step


def interrupt(config: Path, out: Path, flags: tuple[str, ...], how: str, log: Path) -> int:
    """Run the job and stop it right after its second checkpoint: `resume` kills everything
    and resumes with --ckpt.resume-step -1; `restart` kills the trainer under --max-restarts 1.
    Returns the step the run went on from."""
    run = RunDir(out)
    extra = ("--max-restarts", "1") if how == "restart" else ()
    rl = start_rl(config, *flags, *extra, log=log, env=env_with_test_envs())
    try:
        wait_for(lambda: (run.latest_checkpoint() or 0) >= 2, 600, "checkpoint 2", proc=rl, log=log)
        pids = run_state(out)["pids"]
        if how == "restart":
            os.kill(pids["trainer"], signal.SIGKILL)
            assert rl.wait(timeout=900) == 0, log.read_text()[-3000:]
            return int(re.findall(r"resuming from step (\d+)", log.read_text())[-1])
        sessions = {rl.pid, *pids.values()}
        for pid in sessions:
            os.killpg(pid, signal.SIGKILL)
        wait_for(lambda: not session_members(sessions), 30, "the killed run to exit")
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    resumed_from = run.latest_checkpoint()
    run_to_end(config, out, (*flags, "--ckpt.resume-step", "-1"), log.with_suffix(".resumed"))
    return resumed_from


@pytest.mark.slow
@pytest.mark.parametrize("how", ["resume", "restart"])
@pytest.mark.parametrize("async_level", [0, 1])
@pytest.mark.parametrize("transport", ["filesystem", "collective"])
def test_a_resumed_run_equals_the_uninterrupted_one(
    tiny_model_dir, tmp_path, transport, async_level, how
):
    config, out, flags = det_job(tmp_path, tiny_model_dir, "whole", transport, async_level)
    run_to_end(config, out, flags, tmp_path / "whole.log")
    config2, out2, _ = det_job(tmp_path, tiny_model_dir, "cut", transport, async_level)
    step = interrupt(config2, out2, flags, how, tmp_path / "cut.log")
    whole, cut = numbers(out), numbers(out2)
    after = {k for k in whole if k[1] > step or (k[0] == "orchestrator" and k[1] >= step)}
    assert step >= 2 and after and {k: cut[k] for k in after} == {k: whole[k] for k in after}
    assert RunDir(out2).latest_checkpoint() == 4
