"""AdamW and its learning-rate schedule: linear warmup, then constant, linear or cosine decay
towards `min_lr` at `max_steps`."""

import math

import torch
from torch import nn

from trainer.config import OptimConfig
from trainer.speed_policy import choose_fused


def lr_factor(config: OptimConfig, max_steps: int, step: int) -> float:
    """Multiplier of `lr` for optimizer step `step + 1` (`step` steps already taken)."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    if config.scheduler == "constant":
        return 1.0
    decay_steps = max(max_steps - config.warmup_steps, 1)
    progress = min((step - config.warmup_steps) / decay_steps, 1.0)
    floor = config.min_lr / config.lr
    if config.scheduler == "linear":
        return floor + (1 - floor) * (1 - progress)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


def build_optimizer(
    model: nn.Module, config: OptimConfig, max_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    params = [p for p in model.parameters() if p.requires_grad]
    on_gpu = bool(params) and params[0].device.type == "cuda"
    fused, _ = choose_fused(config.fused, on_gpu)
    optimizer = torch.optim.AdamW(
        params,
        lr=config.lr,
        betas=config.betas,
        eps=config.eps,
        weight_decay=config.weight_decay,
        fused=fused or None,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(config, max_steps, step)
    )
    return optimizer, scheduler
