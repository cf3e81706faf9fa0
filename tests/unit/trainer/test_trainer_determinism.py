"""The trainer's half of `deterministic = true`: the same batches give the same weights, bit for
bit, with torch's deterministic algorithms on (in bf16 compute, where reductions differ most)."""

import hashlib

import pytest
import torch

from rlcore.runs.rundir import RunDir
from trainer.train import run


@pytest.fixture
def restore_torch_flags():
    yield
    torch.use_deterministic_algorithms(False)


def weights_digest(out) -> str:
    folder = RunDir(out).weight_dir(2)
    files = sorted(folder.glob("*.safetensors"))
    assert files
    return hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()


def test_two_deterministic_runs_publish_the_same_weights(
    tiny_model_dir, tmp_path, fake_config, restore_torch_flags
):
    model = {"name": str(tiny_model_dir), "dtype": "bfloat16", "serving_dtype": "float32"}
    digests = []
    for name in ("a", "b"):
        run(fake_config(tiny_model_dir, tmp_path / name, deterministic=True, model=model))
        digests.append(weights_digest(tmp_path / name))
    assert torch.are_deterministic_algorithms_enabled()
    assert digests[0] == digests[1]
