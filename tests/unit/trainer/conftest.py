"""Fixtures for in-process trainer tests on the tiny model."""

import sys
from pathlib import Path

import pytest
import torch

from trainer.config import TrainerConfig
from trainer.dist import World


@pytest.fixture
def cpu_world() -> World:
    """A single CPU process, no process group."""
    return World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)


@pytest.fixture
def fake_config():
    """`fake_config(model_dir, out, **overrides)`: a 2-step fp32 config on synthetic batches."""

    def make(model_dir: Path, out: Path, **overrides) -> TrainerConfig:
        data = {
            "model": {"name": str(model_dir), "dtype": "float32"},
            "output_dir": str(out),
            "max_steps": 2,
            "seq_len": 32,
            "data": {"fake": {"batch_size": 2}},
            "optim": {"lr": 1e-3},
        }
        return TrainerConfig.model_validate(data | overrides)

    return make


FAMILY_VOCAB = 512


@pytest.fixture(scope="module")
def family_dirs(tmp_path_factory) -> dict[str, Path]:
    """Tiny random models of every architecture family (tests/families.py), vocabulary 512."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from families import HEAD_FAMILIES, build_family_model

    root = tmp_path_factory.mktemp("families")
    for family in HEAD_FAMILIES:
        build_family_model(family, FAMILY_VOCAB).save_pretrained(root / family)
    return {family: root / family for family in HEAD_FAMILIES}
