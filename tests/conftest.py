"""Shared pytest fixtures. Owned by inference; other components may append fixtures."""

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """A tiny random-weight Qwen3 HF folder (SmolLM2 tokenizer, ChatML), built once into the
    cache folder ($RL_CACHE_DIR, default ~/.cache/rl-launcher) and shared by every test.

    Treat it as read-only: copy it (shutil.copytree) before writing into it."""
    from rlcore.models import cached_tiny_model

    return cached_tiny_model(seed=0)
