"""The pre-flight estimate of the trainer's peak memory."""

import json

import torch
from safetensors.torch import save_file

from launcher.memory import GIB, check_memory, model_shape, safetensors_params, trainer_peak
from launcher.rl_config import RLConfig


def test_parameters_are_counted_from_the_safetensors_headers(tmp_path):
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, tmp_path / "one.safetensors")
    save_file({"c": torch.zeros(2, 2, 2)}, tmp_path / "two.safetensors")
    assert safetensors_params(tmp_path) == 12 + 5 + 8


def test_shape_of_the_tiny_model(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    shape = model_shape(tiny_model_dir)
    assert shape is not None and shape.layers == config["num_hidden_layers"]
    assert shape.vocab == config["vocab_size"] and shape.params > shape.vocab * shape.hidden


def test_terms_scale_with_tokens_shards_and_checkpointing(tiny_model_dir):
    shape = model_shape(tiny_model_dir)
    small = trainer_peak(shape, 1024, 2, checkpointing=False)
    large = trainer_peak(shape, 4096, 2, checkpointing=False)
    assert large["loss head"] == 4 * small["loss head"]
    assert large["activations"] == 4 * small["activations"]
    assert large["optimizer"] == small["optimizer"] == 8 * shape.params
    sharded = trainer_peak(shape, 1024, 2, checkpointing=False, shards=4)
    assert sharded["optimizer"] == small["optimizer"] / 4
    assert trainer_peak(shape, 1024, 2, checkpointing=True)["activations"] < small["activations"]
    adapters = trainer_peak(shape, 1024, 2, checkpointing=False, trainable=1000)
    assert adapters["optimizer"] == 8000 and adapters["weights"] == small["weights"]


def test_a_batch_too_large_for_this_machine_is_warned_about_with_the_knobs(tiny_model_dir):
    config = RLConfig.model_validate({"model": {"name": str(tiny_model_dir)}})
    line, warning = check_memory(config, {"trainer": [], "inference": []})
    assert line.startswith("trainer peak memory: about") and warning is None
    # 4M tokens in one forward pass: the loss head alone is far beyond any machine here.
    config.trainer.data.micro_batch_tokens = 4 * 2**20
    line, warning = check_memory(config, {"trainer": [], "inference": []})
    assert warning is not None and "--trainer.data.micro-batch-tokens (now 4194304)" in warning
    assert "activation-checkpointing" in warning and "loss head" in warning
    assert float(line.split("about ")[1].split(" GiB")[0]) * GIB > 16 * GIB


def test_on_cpu_the_background_writes_copies_are_counted_unless_they_are_off(tiny_model_dir):
    shape = model_shape(tiny_model_dir)
    config = RLConfig.model_validate({"model": {"name": str(tiny_model_dir)}})
    line, _ = check_memory(config, {"trainer": [], "inference": []})
    assert f"background copies {16 * shape.params / GIB:.1f}" in line
    config.trainer.ckpt.background = False
    config.trainer.weight_transfer.background = False
    line, _ = check_memory(config, {"trainer": [], "inference": []})
    assert "background copies" not in line  # a zero term is left out
