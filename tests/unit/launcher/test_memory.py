"""The pre-flight estimate of the trainer's peak memory, checked against facts found another
way: the parameter count transformers reports, the bytes a real AdamW step holds, and the
direction each knob moves the total."""

import pytest
import torch
from safetensors.torch import save_file

from launcher.memory import (
    GIB,
    background_copies,
    check_memory,
    model_shape,
    safetensors_params,
    trainer_peak,
)
from launcher.rl_config import RLConfig


def test_parameters_are_counted_from_the_safetensors_headers(tmp_path):
    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, tmp_path / "one.safetensors")
    save_file({"c": torch.zeros(2, 2, 2)}, tmp_path / "two.safetensors")
    assert safetensors_params(tmp_path) == 12 + 5 + 8


def test_shape_of_the_tiny_model_matches_transformers(tiny_model_dir):
    """Read from the files alone, the shape agrees with the model transformers builds: its
    parameter count (tied embeddings once), width, depth and vocabulary."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    shape = model_shape(tiny_model_dir)
    assert shape is not None and shape.params == model.num_parameters()
    assert (shape.hidden, shape.layers) == (
        model.config.hidden_size,
        model.config.num_hidden_layers,
    )
    assert shape.vocab == model.config.vocab_size


def tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def test_the_state_terms_are_what_a_real_fp32_step_holds(tiny_model_dir):
    """One real AdamW step of the tiny model in fp32: its weights, gradients and optimizer
    moments take the bytes the estimate says, and the loss head at least one fp32 logits
    tensor of the pass."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    ids = torch.randint(
        0, model.config.vocab_size, (1, 64), generator=torch.Generator().manual_seed(0)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    logits = model(ids).logits
    logits.float().logsumexp(-1).mean().backward()
    optimizer.step()
    moments = [v for state in optimizer.state.values() for k, v in state.items() if k != "step"]
    params = list(model.parameters())  # each tied tensor once

    est = trainer_peak(model_shape(tiny_model_dir), 64, 4, checkpointing=False)
    assert est["weights"] == tensor_bytes(params)
    assert est["gradients"] == tensor_bytes(p.grad for p in params)
    assert est["optimizer"] == tensor_bytes(moments)
    assert est["compute copy"] == 0  # fp32 compute needs no second copy
    assert est["loss head"] >= logits.numel() * 4
    # the background writes' copies: a checkpoint's weights and moments, a published policy
    staged = tensor_bytes(params) + tensor_bytes(moments) + tensor_bytes(params)
    assert background_copies(model_shape(tiny_model_dir), None, True, True) == staged


def test_the_estimate_grows_and_shrinks_with_its_knobs(tiny_model_dir):
    shape = model_shape(tiny_model_dir)

    def total(tokens=1024, **knobs) -> float:
        return sum(trainer_peak(shape, tokens, 2, **{"checkpointing": False} | knobs).values())

    sizes = [total(tokens) for tokens in (256, 1024, 4096, 16384)]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)  # more tokens, more memory
    assert total(checkpointing=True) < total()
    assert total(shards=4) < total(shards=2) < total()
    assert total(trainable=1000) < total()  # LoRA: gradients and moments of the adapters only
    assert total(4096, head_chunk=256) < total(4096)
    assert total(checkpointing=True, checkpoint_freq=2) > total(checkpointing=True)


def test_activations_by_hand_in_each_compute_dtype_with_and_without_adapters(tiny_model_dir):
    """Saved activations are tokens x layers x hidden x the bytes per hidden unit measured for
    the compute dtype: bf16's, fp32's (1.5x), and a third more of either under LoRA adapters
    on a frozen base (fitted to the LoRA runs' peaks)."""
    shape = model_shape(tiny_model_dir)
    cells = 100 * shape.layers * shape.hidden

    def activations(compute_bytes: int, trainable: int | None = None) -> float:
        parts = trainer_peak(shape, 100, compute_bytes, False, trainable=trainable)
        return parts["activations"]

    assert activations(2) == cells * 85
    assert activations(2, trainable=1000) == cells * 112
    assert activations(4) == cells * 125
    assert activations(4, trainable=1000) == cells * 165


def test_bf16_adapters_take_the_plain_figure_on_gpus(tiny_model_dir):
    """bf16's third more under adapters was measured with a CPU's autocast only: on GPUs
    adapters take bf16's plain figure, and a full model is the same on either."""
    shape = model_shape(tiny_model_dir)
    cells = 100 * shape.layers * shape.hidden

    def activations(on_gpu: bool, trainable: int | None) -> float:
        parts = trainer_peak(shape, 100, 2, False, trainable=trainable, on_gpu=on_gpu)
        return parts["activations"]

    assert activations(True, 1000) == activations(True, None) == cells * 85
    assert activations(False, 1000) == cells * 112 and activations(False, None) == cells * 85


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


def declared_model(folder, tiny_model_dir, num_params: int):
    """The tiny model's config with one fp32 tensor of `num_params` elements in a valid
    safetensors file that takes no disk (its data region is a sparse run of zeros)."""
    import json
    import shutil
    import struct

    folder.mkdir()
    shutil.copy(tiny_model_dir / "config.json", folder / "config.json")
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [num_params], "data_offsets": [0, 4 * num_params]}}
    ).encode()
    with (folder / "model.safetensors").open("wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        f.truncate(8 + len(header) + 4 * num_params)
    return folder


@pytest.mark.parametrize(
    ("ckpt", "publish", "gib"),
    [(True, True, "2.0"), (True, False, "1.5"), (False, True, "0.5"), (False, False, None)],
)
def test_on_cpu_the_background_writes_copies_are_counted_unless_they_are_off(
    tmp_path, tiny_model_dir, ckpt, publish, gib
):
    """2**27 parameters: a checkpoint written in the background holds a staged copy of the
    fp32 weights and both AdamW moments (4 + 8 bytes a parameter, what a real step holds:
    the test above), a policy published in the background an fp32 copy (4 bytes): 2 GiB with
    both, 1.5 with the checkpoint's alone, 0.5 with the policy's alone, and no term with
    neither."""
    model = declared_model(tmp_path / "model", tiny_model_dir, 2**27)
    config = RLConfig.model_validate({"model": {"name": str(model)}})
    config.trainer.ckpt.background = ckpt
    config.trainer.weight_transfer.background = publish
    line, _ = check_memory(config, {"trainer": [], "inference": []})
    if gib is None:
        assert "background copies" not in line, line  # a zero term is left out
    else:
        assert f"background copies {gib}," in line or f"background copies {gib})" in line, line


@pytest.mark.parametrize(
    ("dtype", "replicas", "share_gib"), [("float32", 1, 6.5), ("bfloat16", 2, 12.0)]
)
def test_on_cpu_the_trainer_has_what_inference_leaves(
    tmp_path, tiny_model_dir, monkeypatch, dtype, replicas, share_gib
):
    """2**28 parameters, served in fp32 (4 bytes: 1 GiB) or bf16 (2 bytes: 0.5 GiB), a 3.5 GiB
    KV cache and vLLM's 2 GiB of its own: 6.5 GiB for one replica, (0.5 + 3.5 + 2) x 2 = 12 GiB
    for two in bf16 — worked out by hand; the machine has 32 GiB available."""
    from launcher import memory

    model = declared_model(tmp_path / "model", tiny_model_dir, 2**28)
    config = RLConfig.model_validate({"model": {"name": str(model)}})
    config.inference.model.dtype = dtype
    config.inference.cpu.kvcache_space_gib = 3.5
    config.inference.replicas = replicas
    monkeypatch.setattr(memory, "available_ram", lambda: 32 * GIB)
    have, where = memory.trainer_memory(
        config, {"trainer": [], "inference": []}, model_shape(model)
    )
    assert have == (32 - share_gib) * GIB and "less inference's share" in where
    # With inference on GPUs, the trainer on CPU has the whole machine.
    have, _ = memory.trainer_memory(config, {"trainer": [], "inference": [0]}, model_shape(model))
    assert have == 32 * GIB
