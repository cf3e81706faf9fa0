"""The trainer's model to the type checker: a transformers causal LM (its `config`, head and
decoder) that `load_model` (trainer/model.py) gives the run's facts as attributes. Nothing here
runs: `TrainerModel` names those attributes and their types, and `load_model` returns its model
as one."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from trainer.config import LoraConfig
from trainer.speed_policy import SpeedChoices

if TYPE_CHECKING:
    from transformers import PreTrainedModel as CausalLM
else:
    CausalLM = nn.Module  # transformers is imported when the model loads, not before


class TrainerModel(CausalLM):
    compute_dtype: torch.dtype
    """What the forward pass computes in (`model.dtype`, `auto` resolved)."""
    serving_dtype: torch.dtype
    """What published weights are written in (what inference serves)."""
    chunked_head: bool
    """Whether the chunked logprob head stands in for the model's own (trainer/logprob_head.py)."""
    logprob_request: Any
    """The chunked head's request (trainer.logprob_head.LogprobRequest), None for full logits."""
    speed: SpeedChoices
    """The run's speed choices (trainer/speed.py)."""
    lora_config: LoraConfig | None
    """The adapters' config (trainer/lora.py); None (or absent) without adapters."""
    lora_modules: list[str]
    """The modules given adapters."""
    set_requires_gradient_sync: Callable[[bool], None]
    """FSDP2's, once `shard_model` has sharded it (a distributed world only)."""
