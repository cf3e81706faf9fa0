"""LoRA: low-rank adapters on the policy's linear layers, trained while the base stays frozen.

A target `nn.Linear` is replaced by a `LoraLinear` that shares its weight and bias and adds
`(alpha / rank) * B @ A`. The base weight keeps its state-dict key (`...q_proj.weight`) and the
adapter lives next to it (`...q_proj.lora_A.weight`, `...q_proj.lora_B.weight`), which is PEFT's
layout: the published folder (`adapter_config.json` + `adapter_model.safetensors`, keys prefixed
with `base_model.model.`) is what vLLM and PEFT load. B starts at zero, so step 0 is the base
model exactly.

Written here rather than taken from `peft`: about a hundred lines, no extra dependency pinned
against transformers 5, base-weight names unchanged (checkpoints, FSDP2 sharding per decoder
layer and merged exports need no key mapping), and the adapters stay plain fp32 parameters that
FSDP2's mixed-precision policy casts for compute like every other parameter.
"""

import json
import math
from pathlib import Path

import torch
from torch import nn

from rlcore.errors import ConfigError
from trainer.config import LoraConfig
from trainer.model_type import TrainerModel

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."


class LoraLinear(nn.Linear):
    """`nn.Linear` plus a low-rank update; the frozen base weight and bias are the original
    layer's parameters (shared, not copied)."""

    def __init__(self, base: nn.Linear, config: LoraConfig):
        super().__init__(base.in_features, base.out_features, bias=False, device="meta")
        self.weight = base.weight
        self.bias = base.bias
        device = base.weight.device
        self.lora_A = nn.Linear(self.in_features, config.rank, bias=False, device=device)
        self.lora_B = nn.Linear(config.rank, self.out_features, bias=False, device=device)
        self.lora_dropout = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
        self.scale = config.alpha / config.rank
        nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
        nn.init.zeros_(self.lora_B.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        delta = self.lora_B(self.lora_A(self.lora_dropout(x)))
        return super().forward(x) + delta * self.scale

    def merged_weight(self) -> torch.Tensor:
        """The base weight with the adapter folded in, in fp32."""
        delta = self.lora_B.weight.float() @ self.lora_A.weight.float()
        return self.weight.float() + delta * self.scale


def apply_lora(model: TrainerModel, config: LoraConfig) -> list[str]:
    """Freeze every parameter, then give each linear layer named in `config.target_modules` a
    trainable fp32 adapter; returns the adapted module names. A target that matches nothing is a
    ConfigError listing the linear layers the model has."""
    for param in model.parameters():
        param.requires_grad_(False)
    targets = set(config.target_modules)
    linears = {name: m for name, m in model.named_modules() if type(m) is nn.Linear}
    chosen = [name for name in linears if name.rsplit(".", 1)[-1] in targets]
    found = {name.rsplit(".", 1)[-1] for name in chosen}
    if targets - found:
        available = sorted({name.rsplit(".", 1)[-1] for name in linears})
        raise ConfigError(
            f"lora.target_modules {sorted(targets - found)} match no linear layer of this "
            f"model; its linear layers are {available}"
        )
    for name in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, LoraLinear(linears[name], config).to(torch.float32))
    model.lora_config = config
    model.lora_modules = chosen
    return chosen


def is_lora(model: TrainerModel) -> bool:
    return getattr(model, "lora_config", None) is not None


def trainable_names(model: TrainerModel) -> set[str]:
    """State-dict names of the parameters that train, a tied parameter under each name."""
    params = model.named_parameters(remove_duplicate=False)
    return {name for name, param in params if param.requires_grad}


def adapter_config(model: TrainerModel, base_model: str) -> dict:
    """PEFT's `adapter_config.json` for the model's adapters (what vLLM's LoRA loader reads)."""
    config = model.lora_config
    assert config is not None, "a model with adapters (apply_lora)"
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": config.rank,
        "lora_alpha": config.alpha,
        "lora_dropout": config.dropout,
        "target_modules": sorted({name.rsplit(".", 1)[-1] for name in model.lora_modules}),
        "bias": "none",
        "fan_in_fan_out": False,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }


def peft_key(name: str) -> str:
    """A trainer state-dict key -> PEFT's adapter key (FSDP/checkpoint wrappers stripped)."""
    name = name.replace("_checkpoint_wrapped_module.", "").replace("_orig_mod.", "")
    return PEFT_PREFIX + name


def write_adapter(folder: Path, model: TrainerModel, state: dict[str, torch.Tensor], base: str):
    """Write `state` (the adapter tensors, trainer keys) as a PEFT adapter folder."""
    from safetensors.torch import save_file

    tensors = {peft_key(k): v.contiguous() for k, v in state.items() if ".lora_" in k}
    save_file(tensors, str(folder / ADAPTER_WEIGHTS), metadata={"format": "pt"})
    text = json.dumps(adapter_config(model, base), indent=2) + "\n"
    (folder / ADAPTER_CONFIG).write_text(text)


def merge_lora(model: TrainerModel) -> None:
    """Fold every adapter into its base weight and put plain `nn.Linear` layers back, so the
    model saves as an ordinary HF folder."""
    for name, module in list(model.named_modules()):
        if not isinstance(module, LoraLinear):
            continue
        merged = nn.Linear(module.in_features, module.out_features, bias=False, device="meta")
        weight = module.merged_weight().to(module.weight.dtype)
        merged.weight = nn.Parameter(weight, requires_grad=False)
        merged.bias = module.bias
        parent_name, _, child = name.rpartition(".")
        setattr(model.get_submodule(parent_name), child, merged)
    model.lora_config = None
    model.lora_modules = []
