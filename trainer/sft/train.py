"""The SFT loop: the RL trainer's model, optimizer, checkpoints and metrics with a supervised
loss. Each step takes `data.batch_size` examples (trainer/sft/data.py), packs them into passes,
and minimises the mean negative log-likelihood of their target tokens; `[val]` reports a
held-out loss. The end: `weights/step_<max_steps>`, a plain Hugging Face folder (LoRA merged
into it unless `lora_output = "adapter"`).

Produces: configs/sft.toml, checkpoints/step_<n>/trainer/ (+ MANIFEST) every ckpt.interval
steps and at the end, weights/step_<n> + STABLE at the end, metrics.jsonl records.
"""

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlcore.config.toml_io import write_config
from rlcore.errors import ConfigError
from rlcore.host.models import resolve_model
from rlcore.runs import runguard
from rlcore.runs.rundir import RunDir, is_checkpoint_step
from trainer.ckpt import Checkpointer, load_checkpoint
from trainer.determinism import prepare_environment, setup_determinism
from trainer.dist import World, setup_world, teardown_world
from trainer.metrics import MetricsLogger
from trainer.model import load_model, source_dir
from trainer.model_type import TrainerModel
from trainer.optim import build_optimizer
from trainer.sft.config import SFTConfig
from trainer.sft.data import (
    Example,
    PackedRow,
    empty_row,
    load_rows,
    pack,
    step_examples,
    tokenize_rows,
)
from trainer.train import (
    forward_logprobs,
    peak_memory_gib,
    quiet_libraries,
    release_freed_memory,
)

logger = logging.getLogger("trainer")


@dataclass
class SFT:
    config: SFTConfig
    world: World
    run_dir: RunDir
    model: TrainerModel
    optimizer: torch.optim.Optimizer
    scheduler: Any
    checkpointer: Checkpointer
    examples: list[Example]
    val_examples: list[Example]
    logger: MetricsLogger | None = None
    start_step: int = 0


def run(config: SFTConfig, started: Callable[[], None] | None = None) -> None:
    """Set up (data, folder, model, optimizer), call `started` once all of that has passed,
    then train to `max_steps`."""
    prepare_environment(config.deterministic)
    world = setup_world()
    try:
        sft = setup_sft(config, world)
        if started is not None and world.is_main:
            started()
        for step in range(sft.start_step + 1, config.max_steps + 1):
            sft_step(sft, step)
        sft.checkpointer.close()
        publish_final(sft)
        if sft.logger:
            sft.logger.finish()
    finally:
        teardown_world(world)


def setup_sft(config: SFTConfig, world: World) -> SFT:
    quiet_libraries()
    setup_determinism(config.seed, config.deterministic)
    try:
        source = resolve_model(config.model.name)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    examples, val_examples = load_examples(config, source)  # bad data fails before any write
    run_dir, resume_step = setup_run_dir(config, world)
    if world.is_main:
        write_config(config, run_dir.config_file("sft"))
    model = load_model(config.model, source, world, config.lora, masked_rows=False)
    if config.model.serving_dtype is None:  # the final folder keeps the fp32 master weights
        model.serving_dtype = torch.float32
    optimizer, scheduler = build_optimizer(model, config.optim, config.max_steps)
    checkpointer = Checkpointer(
        run_dir, world, ("trainer",), config.ckpt.keep, config.ckpt.background
    )
    sft = SFT(
        config, world, run_dir, model, optimizer, scheduler, checkpointer, examples, val_examples
    )
    saved: dict[str, Any] = {}
    if resume_step is not None:
        saved = load_checkpoint(run_dir, resume_step, model, optimizer, scheduler, world)
        sft.start_step = resume_step
        logger.info(f"resumed from checkpoint step {resume_step}")
    if world.is_main:
        sft.logger = MetricsLogger(run_dir, config.wandb, config.model_dump(mode="json"), True)
        sft.logger.start_wandb(saved.get("wandb_run_id"))
    return sft


def setup_run_dir(config: SFTConfig, world: World) -> tuple[RunDir, int | None]:
    """The run folder (claimed; never beside a running `rl`) and the step to resume from."""
    run_dir = RunDir(config.output_dir)
    resume_step = None
    if world.is_main:
        resume_step = run_dir.prepare_attempt(config.ckpt.resume_step, ("weights",), runguard.SFT)
    resume_step = world.broadcast_object(resume_step)
    world.barrier()
    return run_dir, resume_step


def load_examples(config: SFTConfig, source: str) -> tuple[list[Example], list[Example]]:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source)
    data = config.data
    rows = load_rows(data.name, data.split, "data.name")
    label = f"data.name = {data.name!r}"
    examples, counts = tokenize_rows(rows, tokenizer, config.seq_len, data.overlong, label)
    logger.info(f"{data.name} [{data.split}]: {counts.summary(config.seq_len)}")
    val_examples: list[Example] = []
    if config.val is not None:
        name = config.val.name or data.name
        val_rows = load_rows(name, config.val.split, "val.name" if config.val.name else "data.name")
        val_rows = val_rows[: config.val.num_examples]
        label = f"validation data {name!r} [{config.val.split}]"
        val_examples, counts = tokenize_rows(val_rows, tokenizer, config.seq_len, "truncate", label)
        logger.info(f"{name} [{config.val.split}]: {counts.summary(config.seq_len)}")
    return examples, val_examples


def sft_step(sft: SFT, step: int) -> None:
    config, world = sft.config, sft.world
    start = time.perf_counter()
    if world.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    chosen = step_examples(
        len(sft.examples), config.data.batch_size, step, config.seed, config.data.shuffle
    )
    batch = [sft.examples[i] for i in chosen]
    lr = sft.scheduler.get_last_lr()[0]
    loss, num_targets = backward(sft, batch)
    max_norm = config.optim.max_norm or float("inf")
    grad_norm = torch.nn.utils.clip_grad_norm_(sft.model.parameters(), max_norm)
    if hasattr(grad_norm, "full_tensor"):
        grad_norm = grad_norm.full_tensor()
    sft.checkpointer.before_update()
    sft.optimizer.step()
    sft.optimizer.zero_grad(set_to_none=True)
    sft.scheduler.step()
    release_freed_memory(world)
    elapsed = time.perf_counter() - start
    metrics = {
        "loss": loss,
        "grad_norm": float(grad_norm),
        "lr": lr,
        "num_tokens": float(sum(len(e.ids) for e in batch)),
        "num_loss_tokens": float(num_targets),
        "step_time_s": elapsed,
        "peak_memory_gib": peak_memory_gib(world),
    }
    metrics["tokens_per_s"] = metrics["num_tokens"] / elapsed
    val = config.val
    due = val is not None and (step % val.interval == 0 or step == config.max_steps)
    if sft.val_examples and due:
        metrics["val/loss"] = validation_loss(sft)
    if is_checkpoint_step(step, config.ckpt.interval, config.max_steps, config.ckpt.enabled):
        run = sft.logger.wandb_run if sft.logger is not None else None
        extra = {"wandb_run_id": run.id} if run is not None else {}
        sft.checkpointer.save(
            step, sft.model, sft.optimizer, sft.scheduler, extra, last=step == config.max_steps
        )
    if sft.logger:
        sft.logger.log(step, metrics)


def rank_rows(sft: SFT, examples: list[Example]) -> list[PackedRow]:
    """This rank's passes over `examples` (every rank the same number, padded with empty ones)."""
    rows = pack(examples, sft.config.tokens_per_pass(sft.world.device.type == "cpu"))
    world = sft.world
    mine = rows[world.rank :: world.world_size]
    per_rank = -(-len(rows) // world.world_size)
    return mine + [empty_row()] * (per_rank - len(mine))


def backward(sft: SFT, batch: list[Example]) -> tuple[float, int]:
    """Accumulate the gradient of the batch's mean target NLL; returns (loss, target tokens)."""
    world, model = sft.world, sft.model
    num_targets = sum(e.num_targets - e.targets[0] for e in batch)
    rows = rank_rows(sft, batch)
    total = torch.zeros((), device=world.device, dtype=torch.float64)
    for i, row in enumerate(rows):
        row = row.to(world.device)
        if world.distributed:  # reduce gradients once, after the last pass
            model.set_requires_gradient_sync(i == len(rows) - 1)
        logprobs, _ = forward_logprobs(model, world, row, 1.0)
        loss = -(logprobs * row.loss_mask).sum() / num_targets
        (loss * world.world_size).backward()  # FSDP averages over ranks; the loss is a sum
        total += loss.detach().double()
    return float(world.all_reduce_sum(total.reshape(1))), num_targets


@torch.no_grad()
def validation_loss(sft: SFT) -> float:
    world, model = sft.world, sft.model
    sums = torch.zeros(2, device=world.device, dtype=torch.float64)
    model.eval()
    try:
        for row in rank_rows(sft, sft.val_examples):
            row = row.to(world.device)
            logprobs, _ = forward_logprobs(model, world, row, 1.0)
            sums[0] -= (logprobs * row.loss_mask).sum().double()
            sums[1] += row.loss_mask.sum()
    finally:
        model.train()
    nll, tokens = world.all_reduce_sum(sums).tolist()
    return nll / max(tokens, 1)


def publish_final(sft: SFT) -> None:
    """weights/step_<max_steps>: the trained model as an HF folder (LoRA: merged, or the
    adapter as asked), marked STABLE."""
    from trainer.lora import is_lora
    from trainer.weights import full_state_dict, write_policy

    config, world, run_dir = sft.config, sft.world, sft.run_dir
    source = resolve_model(config.model.name)
    step = config.max_steps
    if sft.start_step == step and run_dir.weights_stable(step):
        return  # resumed from the last checkpoint of a run that had finished
    lora = is_lora(sft.model)
    state = full_state_dict(sft.model, world, trainable_only=lora)
    if world.is_main:
        assert state is not None, "full_state_dict gathers on rank 0"
        if lora and config.lora_output == "adapter":
            write_policy(run_dir, step, sft.model, state, source_dir(source), source)
        else:
            model = merged_copy(sft, state, source) if lora else sft.model
            write_full(run_dir, step, model, state if not lora else None, source)
        logger.info(f"final model: {run_dir.weight_dir(step)}")
    world.barrier()


def merged_copy(sft: SFT, adapter: dict, source: str) -> TrainerModel:
    """A fresh CPU copy of the base model with the trained adapters merged into it."""
    from trainer.lora import merge_lora

    cpu = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    model = load_model(sft.config.model, source, cpu, sft.config.lora)
    missing = [
        k for k in model.load_state_dict(adapter, strict=False).missing_keys if ".lora_" in k
    ]
    assert not missing, f"adapters not restored before merging: {missing[:3]}"
    merge_lora(model)
    model.serving_dtype = sft.model.serving_dtype
    return model


def write_full(run_dir: RunDir, step: int, model: TrainerModel, state: dict | None, source: str):
    """weights/<step> as a full HF folder in the model's serving dtype (config.json says so),
    marked STABLE; `state` is the gathered state dict (None: the model's own)."""
    from rlcore.files.atomic import atomic_folder
    from trainer.weights import cast, drop_tied_copies, fix_architectures, write_model_folder

    dtype = model.serving_dtype
    if state is None:
        state = drop_tied_copies(
            model, {k: cast(v.detach(), dtype) for k, v in model.state_dict().items()}
        )
    with atomic_folder(run_dir.weight_dir(step)) as tmp:
        write_model_folder(tmp, model, state, source_dir(source), source)
        fix_architectures(tmp / "config.json", None, dtype)
    run_dir.mark_weights_stable(step)
