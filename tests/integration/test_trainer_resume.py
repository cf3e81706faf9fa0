"""The real `trainer` CLI on the tiny model: kill -9 after a checkpoint, resume, and land on the
same weights as an uninterrupted run; an interrupted save is never taken as the latest."""

import os
import random
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcore.contracts.protocol import Batch, Sample, write_batch
from rlcore.processes.poll import wait_until
from rlcore.runs.rundir import MANIFEST, RunDir

# Slow: three trainer runs; the default run resumes in test_rl.py and test_faults.py.
pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TRAINER = str(ROOT / ".venv" / "bin" / "trainer")
ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def batch(step: int) -> Batch:
    rng = random.Random(step)
    samples = []
    for _ in range(4):
        n_prompt, n_completion = rng.randint(2, 10), rng.randint(4, 20)
        samples.append(
            Sample(
                prompt_ids=[rng.randrange(1000) for _ in range(n_prompt)],
                completion_ids=[rng.randrange(1000) for _ in range(n_completion)],
                completion_mask=[int(rng.random() < 0.9) for _ in range(n_completion)],
                completion_logprobs=[-rng.uniform(5, 12) for _ in range(n_completion)],
                advantage=rng.uniform(-1, 1),
            )
        )
    return Batch(step=step, temperature=0.8, samples=samples)


def write_batches(rd: RunDir, steps) -> None:
    rd.claim()  # the orchestrator's part: a run folder before its first batch
    for step in steps:
        write_batch(batch(step), rd.rollout_dir(step))


def write_toml(path: Path, model_dir: Path, out: Path, extra: str = "") -> Path:
    path.write_text(
        f"""max_steps = 4
seq_len = 64
seed = 0
output_dir = "{out}"
[model]
name = "{model_dir}"
dtype = "float32"
[optim]
lr = 1e-3
warmup_steps = 1
scheduler = "cosine"
[ckpt]
interval = 2
[data]
wait_timeout_s = 120
[parity]
enabled = false  # hand-made batches: their logprobs are not the model's
{extra}"""
    )
    return path


def trainer(toml: Path, *flags: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [TRAINER, "@", str(toml), *flags]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def fake_orchestrator_checkpoints(rd: RunDir, steps) -> None:
    """The orchestrator's half of each checkpoint, so the trainer's half completes it."""
    for step in steps:
        part = rd.checkpoint_dir(step) / "orchestrator"
        part.mkdir(parents=True)
        (part / "DONE").write_text("")


def test_kill_and_resume_matches_uninterrupted_run(tiny_model_dir, tmp_path):
    # Uninterrupted reference run.
    ref = RunDir(tmp_path / "ref")
    write_batches(ref, range(4))
    fake_orchestrator_checkpoints(ref, (2, 4))
    trainer(write_toml(tmp_path / "ref.toml", tiny_model_dir, ref.root))
    assert ref.complete_checkpoints() == [2, 4]

    # Same run, killed with SIGKILL after checkpoint 2, while step 4 waits for its batch.
    rd = RunDir(tmp_path / "run")
    write_batches(rd, range(3))
    fake_orchestrator_checkpoints(rd, (2, 4))
    toml = write_toml(tmp_path / "run.toml", tiny_model_dir, rd.root)
    proc = subprocess.Popen([TRAINER, "@", str(toml)], env=ENV, stdout=subprocess.DEVNULL)
    try:
        # both are written in the background while training goes on
        wait_until(lambda: rd.weights_stable(3), 180, 0.1, "weights/step_3/STABLE")
        wait_until(lambda: rd.checkpoint_complete(2), 180, 0.1, "checkpoint 2 to complete")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert rd.latest_checkpoint() == 2

    # The orchestrator regenerates from its checkpoint: batches 2 and 3 again.
    write_batches(rd, (2, 3))
    done = trainer(toml, "--ckpt.resume-step", "-1")
    assert "resumed from checkpoint step 2" in done.stdout
    assert rd.complete_checkpoints() == [2, 4]

    final, expected = load_weights(rd, 4), load_weights(ref, 4)
    assert final.keys() == expected.keys()
    for name in expected:
        torch.testing.assert_close(final[name], expected[name], rtol=1e-5, atol=1e-6)
    base = load_file(str(Path(tiny_model_dir) / "model.safetensors"))
    assert any(not torch.equal(final[k], base[k]) for k in base)  # it did train


def load_weights(rd: RunDir, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(rd.weight_dir(step) / "model.safetensors"))


def test_interrupted_save_is_not_latest(tiny_model_dir, tmp_path):
    rd = RunDir(tmp_path / "run")
    fake = "[data.fake]\nbatch_size = 2\n"
    toml = write_toml(tmp_path / "run.toml", tiny_model_dir, rd.root, fake)
    trainer(toml, "--max-steps", "2", "--ckpt.interval", "1")
    assert rd.complete_checkpoints() == [1, 2]
    reference = load_weights(rd, 2)

    # Make step 2's save look cut off mid-write: no DONE, no MANIFEST, a missing shard.
    (rd.checkpoint_dir(2) / MANIFEST).unlink()
    part = rd.checkpoint_dir(2) / "trainer"
    (part / "DONE").unlink()
    shutil.rmtree(part / "dcp")
    assert rd.latest_checkpoint() == 1

    done = trainer(toml, "--max-steps", "2", "--ckpt.interval", "1", "--ckpt.resume-step", "-1")
    assert "resumed from checkpoint step 1" in done.stdout
    assert rd.complete_checkpoints() == [1, 2]  # step 2 saved again, whole this time
    for name, tensor in load_weights(rd, 2).items():
        torch.testing.assert_close(tensor, reference[name], rtol=1e-5, atol=1e-6)
