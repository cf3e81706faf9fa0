"""The trainer's side of the weight-transfer seam (rlcore.weight_transfer).

The filesystem transport publishes the policy as `weights/step_<n>`: an HF safetensors folder
(config, tokenizer, generation config) loadable by vLLM and transformers, written as a tmp
folder + rename, then STABLE; it deletes weight folders that no one can need any more. A LoRA
policy (`trainer.lora`) is published as its adapter alone, in PEFT's folder layout
(trainer/lora.py), a few MB instead of the whole model.
"""

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from rlcore.config import WeightTransferConfig
from rlcore.files import atomic_folder
from rlcore.rundir import RunDir, remove_steps
from rlcore.weight_transfer import WeightSender
from trainer.dist import World
from trainer.lora import is_lora, write_adapter

# Files of the source model folder that are not copied: weights and what we write ourselves.
SKIPPED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
SKIPPED_NAMES = {"config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"}


def full_state_dict(
    model: nn.Module, world: World, trainable_only: bool = False
) -> dict[str, torch.Tensor] | None:
    """Unsharded parameters on CPU in the serving dtype, on rank 0 only (None elsewhere); every
    rank must call. `trainable_only`: just the parameters that train (a LoRA adapter)."""
    dtype = getattr(model, "serving_dtype", None)
    if not world.distributed:
        state = model.state_dict()
        if trainable_only:
            state = {n: p for n, p in model.named_parameters() if p.requires_grad}
        return drop_tied_copies(model, {k: cast(v.detach(), dtype) for k, v in state.items()})
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(
        full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only
    )
    state = get_model_state_dict(model, options=options)
    if not world.is_main:
        return None
    return drop_tied_copies(model, {k: cast(v, dtype) for k, v in state.items()})


def drop_tied_copies(model: nn.Module, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Gathered or cast copies of tied parameters no longer share storage, so both would be
    saved: keep only the source (loaders tie them again)."""
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in state and source in state:
            del state[target]
    return state


def cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Floating-point tensors in `dtype` (the fp32 master weights are published in the serving
    dtype); integer buffers unchanged."""
    if dtype is None or not tensor.is_floating_point() or tensor.dtype == dtype:
        return tensor
    return tensor.to(dtype)


def copy_support_files(source: Path | None, folder: Path, tokenizer_source: str) -> None:
    """Tokenizer, chat template and generation config from the source model folder."""
    if source is None:
        from transformers import AutoTokenizer

        AutoTokenizer.from_pretrained(tokenizer_source).save_pretrained(folder)
        return
    for path in source.iterdir():
        if path.is_file() and path.name not in SKIPPED_NAMES:
            if not path.name.endswith(SKIPPED_SUFFIXES) and not path.name.startswith("."):
                shutil.copy2(path, folder / path.name)


def publish_weights(
    run_dir: RunDir,
    step: int,
    model: nn.Module,
    world: World,
    source: Path | None,
    source_name: str,
) -> None:
    """Write weights/step_<step> atomically and mark it STABLE (all ranks call): the whole
    model as an HF folder, or a LoRA model's adapter as a PEFT folder."""
    state = full_state_dict(model, world, trainable_only=is_lora(model))
    if world.is_main:
        with atomic_folder(run_dir.weight_dir(step)) as tmp:
            if is_lora(model):
                write_adapter(tmp, model, state, source_name)
            else:
                write_model_folder(tmp, model, state, source, source_name)
        run_dir.mark_weights_stable(step)
    world.barrier()


def write_model_folder(
    folder: Path, model: nn.Module, state: dict, source: Path | None, source_name: str
) -> None:
    """An HF folder: `state` as safetensors, config, tokenizer and generation config."""
    copy_support_files(source, folder, source_name)
    architectures = model.config.architectures
    model.save_pretrained(folder, state_dict=state)
    fix_architectures(folder / "config.json", architectures, getattr(model, "compute_dtype", None))


def fix_architectures(config_file: Path, architectures: list[str] | None, dtype=None) -> None:
    """Keep the loaded model's class names (a sharded model's class is a wrapper) and state the
    dtype the weights were written in (the master copy in memory is fp32)."""
    config = json.loads(config_file.read_text())
    if architectures:
        config["architectures"] = architectures
    if dtype is not None:
        for key in ("dtype", "torch_dtype"):
            if key in config:
                config[key] = str(dtype).removeprefix("torch.")
    config_file.write_text(json.dumps(config, indent=2) + "\n")


def prune_weights(run_dir: RunDir, step: int, async_level: int) -> None:
    """Delete weight folders older than any batch still to come can be generated from: after
    step n the orchestrator may still use policies >= n - async_level - 1."""
    oldest_needed = step - async_level - 1
    remove_steps(run_dir.weights, lambda s: s >= oldest_needed)


@dataclass
class FilesystemSender(WeightSender):
    """`weights/step_<n>/` folders in the run directory (all ranks call `publish`)."""

    run_dir: RunDir
    model: nn.Module
    world: World
    source: Path | None
    """The model's local folder: tokenizer, chat template and generation config come from it."""
    source_name: str
    async_level: int

    def publish(self, step: int) -> None:
        publish_weights(self.run_dir, step, self.model, self.world, self.source, self.source_name)

    def prune(self, step: int) -> None:
        if self.world.is_main:
            prune_weights(self.run_dir, step, self.async_level)

    def publish_initial(self, step: int) -> None:
        # The base model is always written fresh; a resumed step's folder is kept and reused.
        if step == 0 or not self.run_dir.weights_stable(step):
            self.publish(step)


TRANSPORTS = {"filesystem": FilesystemSender}


def build_sender(
    config: WeightTransferConfig, run_dir: RunDir, model: nn.Module, world: World,
    source: Path | None, source_name: str, async_level: int,
) -> WeightSender:  # fmt: skip
    return TRANSPORTS[config.type](run_dir, model, world, source, source_name, async_level)
