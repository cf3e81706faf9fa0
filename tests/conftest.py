"""Shared pytest fixtures: the tiny model, and W&B's network boundary."""

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest


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
