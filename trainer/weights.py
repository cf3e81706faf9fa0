"""The trainer's side of the weight-transfer seam (rlcore.config.weight_transfer).

The filesystem transport publishes the policy as `weights/step_<n>`: an HF safetensors folder
(config, tokenizer, generation config) loadable by vLLM and transformers, written as a tmp
folder + rename, then STABLE; it deletes weight folders that no one can need any more. A LoRA
policy (`trainer.lora`) is published as its adapter alone, in PEFT's folder layout
(trainer/lora.py), a few MB instead of the whole model.

Off the critical path (`weight_transfer.background`): the step only gathers the weights and
copies them to host memory (pinned buffers, reused, from a GPU); a thread writes the folder and
marks it STABLE while the next step trains. One write is in flight at most: the next publish
waits for it, and `close` waits for the last one.
"""

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch

from rlcore.config.base import WeightTransferConfig
from rlcore.config.weight_transfer import WeightSender
from rlcore.errors import ConfigError
from rlcore.files.atomic import atomic_folder
from rlcore.runs.ownership import owns_weights_folder, remove_path, weights_marker
from rlcore.runs.rundir import RunDir, remove_steps
from trainer.background import BackgroundWriter
from trainer.collective import CollectiveSender
from trainer.dist import World
from trainer.lora import is_lora, write_adapter
from trainer.model import cast, drop_tied_copies
from trainer.model_type import TrainerModel

# Files of the source model folder that are not copied: weights and what we write ourselves.
SKIPPED_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack")
SKIPPED_NAMES = {"config.json", "model.safetensors.index.json", "pytorch_model.bin.index.json"}


def gathered(
    model: TrainerModel, trainable_only: bool = False
) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """The unsharded parameters one at a time, in the serving dtype, where they live (a GPU's
    stay there): (name, tensor, owned), `owned` when the tensor is a copy rather than a live
    parameter. Sharded ones are gathered, a collective: every rank must iterate them all.
    `trainable_only`: just the parameters that train (a LoRA adapter)."""
    from torch.distributed.tensor import DTensor

    dtype = getattr(model, "serving_dtype", None)
    if trainable_only:
        state = {n: p for n, p in model.named_parameters() if p.requires_grad}
    else:
        state = model.state_dict()
    for name, value in drop_tied_copies(model, state).items():
        full = value.full_tensor() if isinstance(value, DTensor) else value.detach()
        served = cast(full, dtype)
        yield name, served, served is not full


def full_state_dict(
    model: TrainerModel, world: World, trainable_only: bool = False
) -> dict[str, torch.Tensor] | None:
    """Unsharded parameters on CPU in the serving dtype, on rank 0 only (None elsewhere); every
    rank must call. Gathered, cast and moved one tensor at a time, so a GPU holds one whole
    tensor at most beyond its shards."""
    state = {}
    for name, tensor, _owned in gathered(model, trainable_only):
        if world.is_main:
            state[name] = tensor.cpu()
    return state if world.is_main else None


def host_state(
    model: TrainerModel, world: World, trainable_only: bool, buffers: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor] | None:
    """Like full_state_dict, in copies that a background writer can own while training goes
    on: a GPU's tensors land in pinned `buffers` (allocated once, reused every step, copied
    into without waiting for each), CPU tensors that are live parameters are cloned."""
    host, on_gpu = {}, False
    for name, tensor, owned in gathered(model, trainable_only):
        if not world.is_main:
            continue
        if tensor.is_cuda:
            buffer = buffers.get(name)
            if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
                buffer = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                buffers[name] = buffer
            host[name], on_gpu = buffer.copy_(tensor, non_blocking=True), True
        else:
            host[name] = tensor if owned else tensor.clone()
    if on_gpu:
        torch.cuda.synchronize()
    return host if world.is_main else None


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
    model: TrainerModel,
    world: World,
    source: Path | None,
    source_name: str,
) -> None:
    """Write weights/step_<step> atomically and mark it STABLE, in the foreground (all ranks
    call)."""
    state = full_state_dict(model, world, trainable_only=is_lora(model))
    if world.is_main:
        assert state is not None, "full_state_dict gathers on rank 0"
        write_policy(run_dir, step, model, state, source, source_name)
    world.barrier()


def write_policy(
    run_dir: RunDir,
    step: int,
    model: TrainerModel,
    state: dict,
    source: Path | None,
    source_name: str,
) -> None:
    """The policy folder from a gathered state dict: the whole model as an HF folder, or a
    LoRA model's adapter as a PEFT folder; STABLE once complete."""
    with atomic_folder(run_dir.weight_dir(step)) as tmp:
        if is_lora(model):
            write_adapter(tmp, model, state, source_name)
        else:
            write_model_folder(tmp, model, state, source, source_name)
    run_dir.mark_weights_stable(step)


def write_model_folder(
    folder: Path, model: TrainerModel, state: dict, source: Path | None, source_name: str
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


def place_weights(run_dir: RunDir, root: Path | None) -> None:
    """`weight_transfer.dir`: make `<output_dir>/weights` a link to `<root>/rl-weights-<id>`
    (the run's id, so a resumed run finds its folders again), a folder marked as this run's so
    that only this run ever deletes it; None: a plain folder. Raises ConfigError when `root`
    cannot hold it, or when `weights` is something the run did not make."""
    link = run_dir.weights
    if root is None:
        if link.is_symlink():  # an earlier attempt kept them elsewhere
            link.unlink()
        return
    run_id = run_dir.claim()
    target = root.expanduser() / f"rl-weights-{run_id}"
    try:
        target.mkdir(parents=True, exist_ok=True)
        if not owns_weights_folder(target, run_id):
            weights_marker(target, run_id, run_dir.root)
        if link.is_symlink() and link.resolve() == target.resolve():
            return
        if link.is_symlink():
            link.unlink()
        elif link.exists():
            remove_path(link)
        link.symlink_to(target.resolve(), target_is_directory=True)
    except OSError as err:
        raise ConfigError(
            f"weight_transfer.dir = {str(root)!r}: cannot keep the policy folders there "
            f"({err.strerror or err}); pick a writable folder (e.g. /dev/shm) or unset it"
        ) from None


def prune_weights(run_dir: RunDir, step: int, async_level: int) -> None:
    """Delete weight folders no batch still to come can be generated from: step n consumed
    batch n - 1, so the orchestrator is at batch b >= n, generated (and loading) from a policy
    >= b - async_level. Keeps async_level + 1 folders (n - async_level ... n)."""
    oldest_needed = step - async_level
    remove_steps(run_dir.weights, lambda s: s >= oldest_needed)


@dataclass
class FilesystemSender(WeightSender):
    """`weights/step_<n>/` folders in the run directory (all ranks call `publish`)."""

    run_dir: RunDir
    model: TrainerModel
    world: World
    source: Path | None
    """The model's local folder: tokenizer, chat template and generation config come from it."""
    source_name: str
    async_level: int
    background: bool = True
    writer: BackgroundWriter = field(default_factory=lambda: BackgroundWriter("weight-writer"))
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    def publish(self, step: int) -> None:
        if not self.background:
            publish_weights(
                self.run_dir, step, self.model, self.world, self.source, self.source_name
            )
            return
        start = time.perf_counter()
        waited = self.writer.wait()  # the buffers may still be in use by the last write
        state = host_state(self.model, self.world, is_lora(self.model), self.buffers)
        if not self.world.is_main:
            return
        args = (self.run_dir, step, self.model, state, self.source, self.source_name)
        self.writer.submit(lambda: self.write_and_prune(step, args))
        self.timings = {
            "publish_copy_s": time.perf_counter() - start - waited,
            "publish_wait_s": waited,
            "publish_write_s": self.writer.last_write_s,  # the previous policy's write
        }

    def write_and_prune(self, step: int, args: tuple) -> None:
        """The writer thread's job: the policy folder, then away with the ones it replaces
        (deleting a GiB folder took 0.27 s of a 1.06 s H100 step on the training thread)."""
        write_policy(*args)
        prune_weights(self.run_dir, step, self.async_level)

    def prune(self, step: int) -> None:
        if self.world.is_main and not self.background:  # else the writer prunes
            prune_weights(self.run_dir, step, self.async_level)

    def publish_initial(self, step: int) -> None:
        # The base model is always written fresh; a resumed step's folder is kept and reused.
        if step == 0 or not self.run_dir.weights_stable(step):
            self.publish(step)
            self.close()

    def close(self) -> None:
        if self.world.is_main:
            self.writer.wait()

    def metrics(self) -> dict[str, float]:
        return self.timings


def filesystem_sender(config, run_dir, model, world, source, source_name, async_level, _wait_s):
    return FilesystemSender(
        run_dir, model, world, source, source_name, async_level, config.background
    )


def collective_sender(config, run_dir, model, world, _source, _name, _async_level, wait_s):
    return CollectiveSender(config, run_dir, model, world, wait_s)


TRANSPORTS = {"filesystem": filesystem_sender, "collective": collective_sender}


def build_sender(
    config: WeightTransferConfig,
    run_dir: RunDir,
    model: TrainerModel,
    world: World,
    source: Path | None,
    source_name: str,
    async_level: int,
    request_timeout_s: float,
) -> WeightSender:
    """The configured transport's sender; `request_timeout_s` bounds how long a transport that
    sends on request waits for the orchestrator to ask."""
    return TRANSPORTS[config.type](
        config, run_dir, model, world, source, source_name, async_level, request_timeout_s
    )
