"""vLLM inspects a model's class once per machine, in a process of its own, before it loads it
(about 9 s on a 2-CPU EPYC): the estimate counts it where vLLM's modelinfos folder holds no
answer for the model's architecture, reading only that folder's names, and says so; the
architecture comes from the user's config.json as untrusted data."""

import json
import os
import shutil
from dataclasses import replace

import pytest
from known_speeds import FLAT, SMALL

from rlcore.forecast import model, report
from rlcore.forecast.model import Job
from rlcore.forecast.shape import folder_shape, named_architecture
from rlcore.host.models import CACHE_ENV

CACHED = "vllm-model_executor-models-llama-LlamaForCausalLM.json"


@pytest.fixture
def vllm_cache(tmp_path, monkeypatch):
    root = tmp_path / "vllm"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(root))
    return root


@pytest.mark.parametrize(
    ("found", "name"),
    [
        (["Qwen3ForCausalLM"], "Qwen3ForCausalLM"),
        (["LlamaForCausalLM", "Other"], "LlamaForCausalLM"),
        ([], ""),
        ("LlamaForCausalLM", ""),  # not a list
        ([7], ""),
        (["../../x"], ""),  # no class name: never part of a name the estimate looks for
        (["A" * 101], ""),
        (None, ""),
    ],
)
def test_the_architecture_is_a_class_name_from_config_json_or_nothing(found, name):
    assert named_architecture(found) == name


def test_a_folders_architecture_is_read_with_its_shape(tmp_path, tiny_model_dir):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    assert folder_shape(folder).architecture == config["architectures"][0]
    (folder / "config.json").write_text(json.dumps({**config, "architectures": [{"x": 1}]}))
    shape = folder_shape(folder)
    assert shape is not None and shape.architecture == ""  # a shape still, no inspection said


def test_vllm_inspects_an_architecture_its_folder_holds_no_answer_for(vllm_cache):
    assert report.vllm_inspects("LlamaForCausalLM")  # no folder yet: a machine's first run
    (vllm_cache / "modelinfos").mkdir(parents=True)
    (vllm_cache / "modelinfos" / CACHED).write_text("{}")
    assert not report.vllm_inspects("LlamaForCausalLM")
    assert report.vllm_inspects("Qwen3ForCausalLM")
    assert not report.vllm_inspects("")  # an unknown architecture counts nothing


def test_only_names_are_read_and_an_unlistable_folder_counts_nothing(vllm_cache):
    vllm_cache.mkdir()
    (vllm_cache / "modelinfos").write_text("a file, not a folder")
    assert not report.vllm_inspects("LlamaForCausalLM")
    (vllm_cache / "modelinfos").unlink()
    (vllm_cache / "modelinfos").mkdir()
    os.mkfifo(vllm_cache / "modelinfos" / CACHED)  # read, it would block: only its name is
    assert not report.vllm_inspects("LlamaForCausalLM")


def test_the_default_folder_follows_xdg_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert report.vllm_inspects("LlamaForCausalLM")
    (tmp_path / "vllm" / "modelinfos").mkdir(parents=True)
    (tmp_path / "vllm" / "modelinfos" / CACHED).write_text("{}")
    assert not report.vllm_inspects("LlamaForCausalLM")


def test_the_inspection_adds_its_import_units_to_an_rl_start_by_hand():
    job = Job(max_steps=4, rollouts=4, answer_tokens=8)
    first = replace(job, inspects_model=True)
    extra = model.start_s(first, SMALL, FLAT) - model.start_s(job, SMALL, FLAT)
    assert extra == pytest.approx(model.MODEL_INSPECTION_IMPORTS * FLAT.import_s)
    sft = replace(job, sft=True)  # no inference, nothing inspected
    assert model.start_s(replace(sft, inspects_model=True), SMALL, FLAT) == model.start_s(
        sft, SMALL, FLAT
    )


def test_an_rl_estimate_counts_and_says_the_first_inspection(vllm_cache, monkeypatch, tmp_path):
    import launcher.forecast
    from launcher.forecast import forecast
    from launcher.prepare import build_plan
    from launcher.rl_config import RLConfig

    monkeypatch.setattr(launcher.forecast, "shared", lambda machine: (1.0, []))  # no load

    monkeypatch.setattr(report, "speeds", lambda *a: replace(FLAT, fingerprint="4b6c73f20e8666da"))
    monkeypatch.setenv("RL_CALIBRATION", "on")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    plan = build_plan(RLConfig.model_validate({}), dry_run=True)  # the bundled default
    first, lines = forecast(plan)
    (vllm_cache / "modelinfos").mkdir(parents=True)
    (vllm_cache / "modelinfos" / CACHED).write_text("{}")
    later, later_lines = forecast(plan)
    assert first is not None and later is not None
    extra = model.MODEL_INSPECTION_IMPORTS * FLAT.import_s
    assert first.start_s - later.start_s == pytest.approx(extra, rel=1e-6)
    said = "first run of LlamaForCausalLM on this machine: vLLM inspects it once"
    assert said in "\n".join(lines) and said not in "\n".join(later_lines)
