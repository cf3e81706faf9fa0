"""The trainer's speed choices on a real (tiny) model: what `auto` picks on this CPU for a short
run and says in one line, explicit settings applied as given, `compile = true` refused where
there is no compiler (a probe result for such a machine), AdamW's fused kernel, the compile
cache folder, and what a compiled run logs of its own compile."""

import logging
import math
from dataclasses import replace

import pytest

from rlcore.errors import ConfigError
from rlcore.host.machine import probe
from trainer.model import decoder_layers
from trainer.speed import CACHE_ENV, CompileClock, use_compile_cache
from trainer.speed_policy import COMPILE_FIGURES
from trainer.train import setup_trainer


def auto_config(fake_config, model_dir, out, **model):
    options = {
        "name": str(model_dir),
        "dtype": "float32",
        "compile": "auto",
        "activation_checkpointing": "auto",
        **model,
    }
    return fake_config(model_dir, out, max_steps=3, ckpt={"enabled": False}, model=options)


def test_auto_on_a_short_cpu_run_compiles_nothing_and_says_why(
    tiny_model_dir, tmp_path, fake_config, cpu_world, caplog
):
    caplog.set_level(logging.INFO, logger="trainer")
    trainer = setup_trainer(auto_config(fake_config, tiny_model_dir, tmp_path), cpu_world)
    speed = trainer.model.speed
    assert (speed.compile, speed.checkpointing, speed.fused) == (False, False, False)
    assert speed.compile_why.startswith("auto: ") and speed.checkpointing_why.startswith("auto: ")
    assert not any(layer.gradient_checkpointing for layer in decoder_layers(trainer.model))
    assert all(layer._compiled_call_impl is None for layer in decoder_layers(trainer.model))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("speed: ")]
    assert lines == [f"speed: {speed.describe()}"]
    assert "compile off (auto: " in lines[0] and "loss head chunked, 2048 tokens" in lines[0]
    assert trainer.compile_clock is None
    trainer.sender.close()


def test_explicit_settings_are_applied_as_given(tiny_model_dir, tmp_path, fake_config, cpu_world):
    config = auto_config(
        fake_config,
        tiny_model_dir,
        tmp_path,
        activation_checkpointing=True,
        activation_checkpointing_freq=2,
    )
    config.optim.fused = True  # CPU has a fused AdamW too
    trainer = setup_trainer(config, cpu_world)
    flags = [layer.gradient_checkpointing for layer in decoder_layers(trainer.model)]
    assert flags == [i % 2 == 0 for i in range(len(flags))]
    assert trainer.model.speed.checkpointing_why == "set in the config"
    assert trainer.optimizer.defaults["fused"] is True
    trainer.sender.close()


def test_compile_true_without_a_compiler_is_refused(
    tiny_model_dir, tmp_path, fake_config, cpu_world, monkeypatch
):
    from trainer import model as trainer_model

    monkeypatch.setattr(trainer_model, "probe", lambda: replace(probe(), compiler=""))
    config = auto_config(fake_config, tiny_model_dir, tmp_path, compile=True)
    with pytest.raises(ConfigError, match="trainer.model.compile = true needs a C.. compiler"):
        setup_trainer(config, cpu_world)


def test_the_compile_cache_lives_in_the_cache_folder(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    monkeypatch.setenv("RL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(CACHE_ENV, raising=False)
    assert use_compile_cache() == str(tmp_path / "compile")
    monkeypatch.delenv(CACHE_ENV)
    cache_dir()  # what importing transformers' models does: torch's default in /tmp
    assert use_compile_cache() == str(tmp_path / "compile") == cache_dir()
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))  # the user's own wins
    assert use_compile_cache() == str(tmp_path / "mine")


def test_a_compiled_run_logs_its_compile_and_payoff_step(caplog):
    """On a GPU at the recorded figures: a 70 s first step, then the recorded compiled step;
    the compile has paid for itself once (eager - compiled) x steps covers it."""
    caplog.set_level(logging.INFO, logger="trainer")
    figures = COMPILE_FIGURES["gpu"]
    clock = CompileClock("gpu", start_step=10)  # a resumed run counts from its first step
    assert clock.observe(11, 70.0) == {}
    figures_now = clock.observe(12, figures.compiled_step_s)
    compile_s = 70.0 - figures.compiled_step_s
    gain = figures.eager_step_s - figures.compiled_step_s
    assert figures_now["compile_s"] == pytest.approx(compile_s)
    assert figures_now["compile_payoff_step"] == 10 + math.ceil(compile_s / gain)
    assert "compile: about 69.4 s" in caplog.text and "paid for itself by step" in caplog.text
    assert clock.observe(13, 0.6) == {}  # said once


def test_a_machine_kind_without_figures_only_reports_the_compile(caplog):
    caplog.set_level(logging.INFO, logger="trainer")
    clock = CompileClock("cpu-float16", start_step=0)
    clock.observe(1, 30.0)
    assert clock.observe(2, 1.0) == {"compile_s": 29.0}
    assert "no measured eager figure" in caplog.text
