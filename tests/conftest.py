"""Shared pytest fixtures: the tiny model, W&B's network boundary, and the in-process
trainer's world, configs and tiny models of every architecture family."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlcore.host import wheel_tags

wheel_tags.repair()  # `uv run --extra cpu pytest` a second time reinstalls nothing


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny random-weight Qwen3 HF folder (SmolLM2 tokenizer, ChatML), built once into the
    cache folder ($RL_CACHE_DIR, default ~/.cache/rl-launcher) and shared by every test.

    Treat it as read-only: copy it (shutil.copytree) before writing into it."""
    from tests.tiny_model import cached_tiny_model

    return cached_tiny_model(seed=0)


class FakeWandb:
    """Stands in for the `wandb` module at its network boundary: records inits and logs."""

    def __init__(self):
        self.inits, self.logged, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append(kwargs)
        run_id = kwargs.get("id") or "run-123"
        return SimpleNamespace(
            id=run_id,
            log=lambda data: self.logged.append((data.get("trainer/step"), data)),
            define_metric=lambda *args, **kwargs: None,
            finish=self.finish,
        )

    def finish(self) -> None:
        self.finished += 1


@pytest.fixture
def fake_wandb(monkeypatch) -> FakeWandb:
    """`import wandb` gets a FakeWandb for the test's duration."""
    fake = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    return fake


@pytest.fixture
def cpu_world():
    """A single CPU process, no process group (trainer.dist.World)."""
    import torch

    from trainer.dist import World

    return World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)


@pytest.fixture
def fake_config():
    """`fake_config(model_dir, out, **overrides)`: a 2-step fp32 config on synthetic batches."""

    from trainer.config import TrainerConfig

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
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from families import HEAD_FAMILIES, build_family_model

    root = tmp_path_factory.mktemp("families")
    for family in HEAD_FAMILIES:
        build_family_model(family, FAMILY_VOCAB).save_pretrained(root / family)
    return {family: root / family for family in HEAD_FAMILIES}


HUB_ENVS = Path(__file__).parent / "fixtures" / "hub_envs"


@pytest.fixture
def hub_environments(monkeypatch):
    """The hub environments the shipped prime-rl-shaped configs and seed guides name
    (`harleycooper/dakota1890`, `your-username/your-env`) installed, as a user installs them
    before a run: importable modules that load a bundled environment."""
    import importlib

    monkeypatch.syspath_prepend(str(HUB_ENVS))
    importlib.invalidate_caches()
    return HUB_ENVS
