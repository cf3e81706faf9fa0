"""Trainer checkpoints: `checkpoints/step_<n>/trainer/` holds the model and optimizer
(torch.distributed.checkpoint, so any number of ranks can save and load), and per rank the
scheduler, RNG states and step. A DONE marker is written last; the MANIFEST that makes the
checkpoint count is written once every part (trainer, orchestrator) is DONE. A LoRA model's
checkpoint holds the adapter and its optimizer state only: the frozen base is loaded from the
model source at every start.

In the background (`ckpt.background`, the default): DCP's async save copies the state to host
memory (pinned from a GPU) during the step, and a thread writes it while training goes on; rank
0 writes DONE (and prunes) only once every rank's data is on disk. One save is in flight at
most; the next save and the end of training wait for it."""

import random
import shutil
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_saver import AsyncSaveResponse

from rlcore import faults
from rlcore.files.disk_full import naming
from rlcore.runs.rundir import DONE, MANIFEST, RunDir
from trainer.background import BackgroundWriter
from trainer.dist import World
from trainer.lora import is_lora, trainable_names
from trainer.model_type import TrainerModel

PART = "trainer"


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


def train_state(model: TrainerModel, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
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
    model: TrainerModel,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    world: World,
    extra: dict[str, Any],
    parts: tuple[str, ...],
) -> None:
    """Save the state after `step` steps in the foreground (all ranks call); `extra` is stored
    on every rank."""
    with naming(run_dir.part_dir(step, PART)):
        folder = start_save(run_dir, step, scheduler, world, extra)
        model_state, optim_state = train_state(model, optimizer)
        dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=folder / "dcp")
        world.barrier()
        if world.is_main:
            finish_save(run_dir, step, parts)


def start_save(run_dir: RunDir, step: int, scheduler: Any, world: World, extra: dict) -> Path:
    """A fresh folder for `step`'s trainer part, with this rank's small states in it."""
    folder = run_dir.part_dir(step, PART)
    if world.is_main:
        shutil.rmtree(folder, ignore_errors=True)  # an earlier interrupted save of this step
        folder.mkdir(parents=True)
    world.barrier()
    local = {"step": step, "scheduler": scheduler.state_dict(), "rng": rng_state(), **extra}
    torch.save(local, folder / f"rank_{world.rank}.pt")
    return folder


def finish_save(run_dir: RunDir, step: int, parts: tuple[str, ...]) -> None:
    """Rank 0, once every rank's data is written: DONE (and the MANIFEST if all parts are)."""
    faults.delay_before_save()
    run_dir.mark_part_done(step, PART, parts)


class Checkpointer:
    """Saves trainer checkpoints, in the background or not, and prunes old ones."""

    def __init__(
        self,
        run_dir: RunDir,
        world: World,
        parts: tuple[str, ...],
        keep: int | None,
        background: bool,
    ):
        self.run_dir, self.world, self.parts, self.keep = run_dir, world, parts, keep
        self.background = background
        self.writer = BackgroundWriter("checkpoint-writer")
        self.group, self.stager = None, None
        self.staging: Future[None] | None = None  # the save in flight's staging
        self.staging_wait_s = 0.0
        if background:
            self.group, self.stager = async_resources(world)

    def save(
        self, step: int, model: TrainerModel, optimizer, scheduler, extra: dict, last: bool = False
    ) -> dict:
        """Checkpoint the state after `step`; returns timings (seconds) for the step's metrics.
        The run's `last` checkpoint is written in the foreground: nothing trains after it, so
        a staged copy of the state would only double the trainer's memory."""
        run_dir, world = self.run_dir, self.world
        if not self.background or last:
            self.before_update()
            self.writer.wait()
            save_checkpoint(run_dir, step, model, optimizer, scheduler, world, extra, self.parts)
            if world.is_main:
                prune_checkpoints(run_dir, self.keep)
            return {}
        waited = self.writer.wait()  # one save in flight
        with naming(run_dir.part_dir(step, PART)):
            folder = start_save(run_dir, step, scheduler, world, extra)
        model_state, optim_state = train_state(model, optimizer)
        response = dcp.async_save(
            {"model": model_state, "optim": optim_state},
            checkpoint_id=folder / "dcp",
            process_group=self.group,
            async_stager=self.stager,
        )
        assert isinstance(response, AsyncSaveResponse), "an async_stager stages apart"
        self.staging = response.staging_completion
        self.writer.submit(lambda: self.finish(response.upload_completion, step))
        staged_s, self.staging_wait_s = self.staging_wait_s, 0.0
        return {
            "ckpt_wait_s": waited,
            "ckpt_write_s": self.writer.last_write_s,
            "ckpt_staging_wait_s": staged_s,
        }

    def before_update(self) -> None:
        """Called before the optimizer changes the weights: the copy of the last save must be
        complete (it runs in the background during the next forward and backward)."""
        if self.staging is None:
            return
        start = time.perf_counter()
        try:
            self.staging.result()
        finally:
            self.staging = None
            self.staging_wait_s += time.perf_counter() - start

    def finish(self, future, step: int) -> None:
        with naming(self.run_dir.part_dir(step, PART)):
            future.result()  # on rank 0: once every rank's data and the metadata are written
        if self.world.is_main:
            finish_save(self.run_dir, step, self.parts)
            prune_checkpoints(self.run_dir, self.keep)

    def close(self) -> None:
        """Wait for the save in flight; raise its error."""
        try:
            self.before_update()
            self.writer.wait()
        finally:
            if self.stager is not None:
                close_stager(self.stager)
                self.stager = None


def async_resources(world: World):
    """A gloo group of its own for DCP's background collectives (they must not interleave with
    the training thread's), and a stager that copies the state in a thread of its own (to pinned
    memory from a GPU) while the next step's forward and backward run."""
    group = None
    if world.distributed:
        import torch.distributed as dist

        group = dist.new_group(backend="gloo")
    return group, make_stager(world)


def make_stager(world: World):
    """DCP's stager: it copies the state in a thread of its own, to pinned memory from a GPU,
    and keeps its copies from one save to the next."""
    from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

    on_gpu = world.device.type == "cuda"
    options = StagingOptions(
        use_pinned_memory=on_gpu,
        use_shared_memory=False,
        use_async_staging=True,
        use_non_blocking_copy=on_gpu,
    )
    stager = DefaultStager(options)
    copier = getattr(stager, "_state_dict_stager", None)
    if copier is not None:
        # torch 2.11 closes the copier after every copy: that drops its pinned copies (the
        # next save allocated and pinned GiBs again, stalling the steps it overlapped: 4.4 s
        # against 1.0 s on an H100) and broke the next copy (KeyError: <class 'type'>).
        # Later torch closes it only with the stager; so do we, in close_stager.
        copier.close = lambda: None
    return stager


def close_stager(stager) -> None:
    """Close DCP's stager and free its copies (the copier's own close, kept by make_stager)."""
    stager.close()
    copier = getattr(stager, "_state_dict_stager", None)
    if copier is not None:
        type(copier).close(copier)


def load_checkpoint(
    run_dir: RunDir,
    step: int,
    model: TrainerModel,
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
