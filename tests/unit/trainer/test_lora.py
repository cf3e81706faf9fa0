"""LoRA in-process on the tiny model: only adapters train, they publish as a PEFT folder, their
checkpoints hold the adapter alone and resume exactly, and merging reproduces the outputs."""

import json

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import load_file

from rlcore.errors import ConfigError
from rlcore.runs.rundir import RunDir
from trainer.config import LoraConfig, TrainerConfig
from trainer.data import fake_batch
from trainer.lora import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraLinear, apply_lora, merge_lora
from trainer.speed import adapter_params
from trainer.train import run, setup_trainer, train_step

LORA = {"rank": 4, "alpha": 8.0, "target_modules": ["q_proj", "v_proj", "down_proj"]}


def lora_config(fake_config, model_dir, out, **overrides):
    return fake_config(model_dir, out, lora=LORA, **overrides)


def step_batch(trainer, step: int):
    vocab = trainer.model.config.vocab_size
    return fake_batch(trainer.config.data.fake, 32, vocab, step, 0)


def test_only_adapters_train_and_base_stays_frozen(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    trainer = setup_trainer(lora_config(fake_config, tiny_model_dir, tmp_path), cpu_world)
    model = trainer.model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    # 2 layers x 3 targets x (A, B)
    assert len(trainable) == 12 and all(".lora_" in n for n in trainable)
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert optimized == {id(p) for n, p in model.named_parameters() if n in trainable}
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    metrics = train_step(trainer, step_batch(trainer, 0))
    assert metrics["grad_norm"] > 0
    for name, param in model.named_parameters():
        changed = not torch.equal(param, before[name])
        # B starts at zero, so A gets no gradient on the first step; B moves.
        if name in trainable and "lora_B" in name:
            assert changed, f"{name} did not train"
        if name not in trainable:
            assert not changed, f"frozen {name} changed"


def test_the_memory_estimate_counts_adapters_only_where_the_base_is_frozen(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    """The trainer's `auto` activation checkpointing reads the memory estimate with the
    parameters that train: the adapters' under LoRA (2 layers x 3 targets x rank 4 x (in +
    out)), None for a full model, which the estimate must not count as adapters."""
    lora = setup_trainer(lora_config(fake_config, tiny_model_dir, tmp_path / "l"), cpu_world)
    by_hand = sum(
        4 * (m.in_features + m.out_features)
        for m in lora.model.modules()
        if isinstance(m, LoraLinear)
    )
    assert by_hand > 0 and adapter_params(lora.model) == by_hand
    full = setup_trainer(fake_config(tiny_model_dir, tmp_path / "f"), cpu_world)
    assert adapter_params(full.model) is None
    lora.sender.close()
    full.sender.close()


def test_zero_adapter_is_the_base_model_and_merge_matches(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    apply_lora(model, LoraConfig(**LORA))
    ids = torch.tensor([[1, 5, 9, 42, 7, 3]])
    torch.testing.assert_close(model(ids).logits, base(ids).logits)  # B = 0 at the start
    torch.manual_seed(1)
    for module in model.modules():
        if isinstance(module, LoraLinear):
            torch.nn.init.normal_(module.lora_B.weight, std=0.05)
    adapted = model(ids).logits.detach()
    assert (adapted - base(ids).logits).abs().max() > 1e-3
    merge_lora(model)
    assert not any(isinstance(m, LoraLinear) for m in model.modules())
    assert not any(".lora_" in k for k in model.state_dict())
    torch.testing.assert_close(model(ids).logits, adapted, rtol=1e-4, atol=1e-4)


def test_published_step_is_a_peft_adapter(tiny_model_dir, tmp_path, fake_config):
    run(lora_config(fake_config, tiny_model_dir, tmp_path, max_steps=2, ckpt={"enabled": False}))
    folder = RunDir(tmp_path).weight_dir(2)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [ADAPTER_CONFIG, ADAPTER_WEIGHTS, "STABLE"]
    )
    config = json.loads((folder / ADAPTER_CONFIG).read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8.0
    assert config["target_modules"] == ["down_proj", "q_proj", "v_proj"]
    tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    assert tensors[name].shape == (4, 64)
    assert len(tensors) == 12
    b = "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"
    assert tensors[b].abs().max() > 0  # trained


def test_lora_checkpoint_is_adapter_only_and_resumes_exactly(
    tiny_model_dir, tmp_path, fake_config, cpu_world
):
    ref_cfg = lora_config(fake_config, tiny_model_dir, tmp_path / "ref", max_steps=3)
    run(ref_cfg)
    cfg = lora_config(
        fake_config, tiny_model_dir, tmp_path / "run", max_steps=3, ckpt={"interval": 1}
    )
    run(cfg.model_copy(update={"max_steps": 2}))
    part = RunDir(tmp_path / "run").part_dir(2, "trainer") / "dcp"
    ckpt_bytes = sum(f.stat().st_size for f in part.rglob("*") if f.is_file())
    base_bytes = (tiny_model_dir / "model.safetensors").stat().st_size
    assert ckpt_bytes < base_bytes / 5  # adapter + two Adam moments, no base weights
    resumed = cfg.model_copy(update={"ckpt": cfg.ckpt.model_copy(update={"resume_step": -1})})
    run(resumed)
    final = load_file(str(RunDir(tmp_path / "run").weight_dir(3) / ADAPTER_WEIGHTS))
    expected = load_file(str(RunDir(tmp_path / "ref").weight_dir(3) / ADAPTER_WEIGHTS))
    assert final.keys() == expected.keys()
    for name in expected:
        assert torch.equal(final[name], expected[name]), name


def test_unknown_target_module_is_a_config_error(tiny_model_dir, tmp_path, fake_config, cpu_world):
    cfg = fake_config(tiny_model_dir, tmp_path, lora={"target_modules": ["q_proj", "qkv"]})
    with pytest.raises(ConfigError, match=r"\['qkv'\] match no linear layer.*'q_proj'"):
        setup_trainer(cfg, cpu_world)


def test_lora_config_rules():
    assert TrainerConfig().lora is None
    assert TrainerConfig.model_validate({"lora": {}}).lora.rank == 16
    with pytest.raises(ValidationError, match="lora.target_modules is empty"):
        LoraConfig(target_modules=[])
    with pytest.raises(ValidationError):
        LoraConfig(dropout=1.0)
