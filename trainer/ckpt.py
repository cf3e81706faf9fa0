"""Trainer checkpoints: `checkpoints/step_<n>/trainer/` holds the model and optimizer
(torch.distributed.checkpoint, so any number of ranks can save and load), and per rank the
scheduler, RNG states and step. A DONE marker is written last; the MANIFEST that makes the
checkpoint count is written once every part (trainer, orchestrator) is DONE. A LoRA model's
checkpoint holds the adapter and its optimizer state only: the frozen base is loaded from the
model source at every start."""

import os
import random
import shutil
import time
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)

from rlcore.rundir import DONE, MANIFEST, RunDir
from trainer.dist import World
from trainer.lora import is_lora, trainable_names

PART = "trainer"
# Fault-injection hook for the fault-matrix tests: seconds to pause inside every save, after the
# data and before the DONE marker, so a kill can land mid-save deterministically.
SAVE_DELAY_ENV = "RL_FAULT_CKPT_SAVE_DELAY_S"


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state()}
    state["torch"] = torch.get_rng_state()
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def train_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Model and optimizer state dicts as checkpoints hold them; frozen parameters (a LoRA
    model's base) are left out."""
    lora = is_lora(model)
    options = StateDictOptions(ignore_frozen_params=lora, strict=not lora)
    model_state, optim_state = get_state_dict(model, optimizer, options=options)
    if lora:  # a tied head stays listed under its second name: keep trainable names only
        trainable = trainable_names(model)
        model_state = {k: v for k, v in model_state.items() if k in trainable}
    return model_state, optim_state


def save_checkpoint(
    run_dir: RunDir,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    world: World,
    extra: dict[str, Any],
    parts: tuple[str, ...],
) -> None:
    """Save the state after `step` steps (all ranks call); `extra` is stored on every rank."""
    folder = run_dir.part_dir(step, PART)
    if world.is_main:
        shutil.rmtree(folder, ignore_errors=True)  # an earlier interrupted save of this step
        folder.mkdir(parents=True)
    world.barrier()
    model_state, optim_state = train_state(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder / "dcp")
    local = {"step": step, "scheduler": scheduler.state_dict(), "rng": rng_state(), **extra}
    torch.save(local, folder / f"rank_{world.rank}.pt")
    world.barrier()
    time.sleep(float(os.environ.get(SAVE_DELAY_ENV) or 0))
    if world.is_main:
        run_dir.mark_part_done(step, PART, parts)


def load_checkpoint(
    run_dir: RunDir,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    world: World,
) -> dict[str, Any]:
    """Restore everything saved at `step`; returns the rank's saved dict (step, extras)."""
    folder = run_dir.part_dir(step, PART)
    if not run_dir.part_done(step, PART):
        raise FileNotFoundError(f"trainer checkpoint {folder} is incomplete (no {DONE} marker)")
    model_state, optim_state = train_state(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=folder / "dcp")
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=StateDictOptions(strict=not is_lora(model)),
    )
    rank_file = folder / f"rank_{world.rank}.pt"
    if not rank_file.exists():  # resumed on more ranks than saved: reuse rank 0's states
        rank_file = folder / "rank_0.pt"
    local = torch.load(rank_file, weights_only=False)
    scheduler.load_state_dict(local["scheduler"])
    set_rng_state(local["rng"])
    return local


def prune_checkpoints(run_dir: RunDir, keep: int | None) -> None:
    """Delete complete checkpoints beyond the newest `keep`; incomplete ones (possibly still
    being written by the orchestrator) are never touched."""
    if keep is None:
        return
    for step in run_dir.complete_checkpoints()[:-keep]:
        (run_dir.checkpoint_dir(step) / MANIFEST).unlink(missing_ok=True)  # stops counting first
        shutil.rmtree(run_dir.checkpoint_dir(step), ignore_errors=True)
