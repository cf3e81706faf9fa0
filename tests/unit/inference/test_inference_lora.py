"""Serving LoRA: the vLLM flags inference.lora owns, and the checks an adapter folder passes
before the engine sees it."""

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from inference.config import InferenceConfig
from inference.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, check_adapter_dir, is_adapter_dir
from inference.vllm_args import owned_argv
from inference.weight_dirs import WeightDirError
from inference.weights import FilesystemLoader
from rlcore.runs.rundir import RunDir


@pytest.fixture
def adapter(tmp_path) -> Path:
    """A small PEFT LoRA folder as the trainer writes it (rank 4, one layer's q_proj)."""
    import torch
    from safetensors.torch import save_file

    folder = tmp_path / "run" / "weights" / "step_3"
    folder.mkdir(parents=True)
    prefix = "base_model.model.model.layers.0.self_attn.q_proj"
    tensors = {f"{prefix}.lora_A.weight": torch.zeros(4, 64)}
    tensors[f"{prefix}.lora_B.weight"] = torch.zeros(128, 4)
    save_file(tensors, str(folder / ADAPTER_WEIGHTS))
    config = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config))
    return folder


def test_lora_flags_come_from_inference_lora():
    plain = owned_argv(InferenceConfig(), "/m", on_cpu=True)
    assert "--enable-lora" not in plain
    config = InferenceConfig.model_validate({"lora": {"max_rank": 32, "max_loras": 3}})
    argv = owned_argv(config, "/m", on_cpu=True)
    assert "--enable-lora" in argv
    assert argv[argv.index("--max-lora-rank") + 1] == "32"
    assert argv[argv.index("--max-loras") + 1] == "3"


def test_lora_flags_are_owned_and_ranks_checked():
    with pytest.raises(ValidationError, match="enable_lora -> lora"):
        InferenceConfig.model_validate({"vllm_args": {"enable_lora": True}})
    with pytest.raises(ValidationError, match=r"lora.max_rank = 12: vLLM takes one of .*use 16"):
        InferenceConfig.model_validate({"lora": {"max_rank": 12}})


def test_adapter_folder_is_checked_before_loading(adapter):
    assert is_adapter_dir(adapter)
    check_adapter_dir(adapter, max_rank=8)
    with pytest.raises(WeightDirError, match="rank-4 adapter.*rank <= 1.*inference.lora.max_rank"):
        check_adapter_dir(adapter, max_rank=1)
    (adapter / ADAPTER_WEIGHTS).unlink()
    with pytest.raises(WeightDirError, match=f"no {ADAPTER_WEIGHTS}") as err:
        check_adapter_dir(adapter, max_rank=8)
    assert err.value.status == 422


def test_bad_adapter_config_is_refused(adapter):
    (adapter / ADAPTER_CONFIG).write_text("{not json")
    with pytest.raises(WeightDirError, match="no valid adapter_config.json"):
        check_adapter_dir(adapter, max_rank=8)
    (adapter / ADAPTER_CONFIG).write_text(json.dumps({"peft_type": "PROMPT_TUNING"}))
    with pytest.raises(WeightDirError, match="not a LoRA adapter config"):
        check_adapter_dir(adapter, max_rank=8)


def test_full_weight_server_refuses_an_adapter(adapter, tiny_model_dir):
    # The engine is never reached: the folder is refused first.
    root = adapter.parents[1]
    updater = FilesystemLoader(None, str(tiny_model_dir), RunDir(root), 10.0, "wait")
    with pytest.raises(WeightDirError, match="started without LoRA: set inference.lora") as err:
        asyncio.run(updater.load({"weight_dir": str(adapter)}))
    assert err.value.status == 422
    outside = root / "elsewhere"  # in the run folder, but not in its weights/
    shutil.copytree(adapter, outside)
    with pytest.raises(WeightDirError, match="outside the allowed root"):
        asyncio.run(updater.load({"weight_dir": str(outside)}))
