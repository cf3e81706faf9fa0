"""Load the policy as an HF causal LM in the configured dtype; shard it with FSDP2 on GPUs."""

from pathlib import Path

import torch
from torch import nn

from trainer.config import TrainerModelConfig
from trainer.dist import World

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def load_model(config: TrainerModelConfig, source: str, world: World) -> nn.Module:
    """The model in train mode on `world.device`, sharded per decoder layer when distributed."""
    from transformers import AutoModelForCausalLM

    dtype = "auto" if config.dtype == "auto" else DTYPES[config.dtype]
    model = AutoModelForCausalLM.from_pretrained(
        source, dtype=dtype, attn_implementation=config.attn_implementation
    )
    model.config.use_cache = False
    if config.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if world.distributed:
        shard_model(model, world)
    else:
        model.to(world.device)
    model.train()
    return model


def shard_model(model: nn.Module, world: World) -> None:
    """FSDP2: one shard group per decoder layer (the model's `_no_split_modules`), then the
    root (embeddings, final norm, head)."""
    from torch.distributed.fsdp import fully_shard

    model.to(world.device)
    layer_classes = set(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in layer_classes:
            fully_shard(module)
    fully_shard(model)


def source_dir(source: str) -> Path | None:
    """The local folder the model came from (tokenizer and config files live there), if any."""
    path = Path(source)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=True))
    except Exception:  # not in the local HF cache: published folders get the tokenizer instead
        return None
