"""The sharded (FSDP2) code path on CPU: two torchrun ranks over gloo train the same weights
as one process, and their checkpoint resumes in one process (DCP reshards)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlcore.runs.rundir import RunDir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ENV = os.environ | {"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def toml(path: Path, model_dir: Path) -> Path:
    path.write_text(
        f"""max_steps = 3
seq_len = 32
[model]
name = "{model_dir}"
dtype = "float32"
[optim]
lr = 1e-3
[ckpt]
interval = 2
[data.fake]
batch_size = 3
"""
    )
    return path


def run(cmd: list[str]) -> str:
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def assert_same_weights(a: RunDir, b: RunDir, step: int) -> None:
    wa = load_file(str(a.weight_dir(step) / "model.safetensors"))
    wb = load_file(str(b.weight_dir(step) / "model.safetensors"))
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=1e-4, atol=1e-5)


def test_two_ranks_match_one_process_and_resume_in_one(tiny_model_dir, tmp_path):
    config = toml(tmp_path / "t.toml", tiny_model_dir)
    single, sharded = RunDir(tmp_path / "single"), RunDir(tmp_path / "sharded")
    run([sys.executable, "-m", "trainer.main", "@", str(config), "--output-dir", str(single.root)])
    flags = ["@", str(config), "--output-dir", str(sharded.root), "--max-steps", "2"]
    run([*TORCHRUN, "-m", "trainer.main", *flags])
    assert sorted(p.name for p in (sharded.checkpoint_dir(2) / "trainer").iterdir()) == [
        "DONE",
        "dcp",
        "rank_0.pt",
        "rank_1.pt",
    ]
    assert_same_weights(single, sharded, 2)

    out = run(
        [
            sys.executable,
            "-m",
            "trainer.main",
            "@",
            str(config),
            "--output-dir",
            str(sharded.root),
            "--ckpt.resume-step",
            "-1",
        ]
    )
    assert "resumed from checkpoint step 2" in out
    assert_same_weights(single, sharded, 3)
