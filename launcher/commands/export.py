"""`rl export RUN [--step N] --out DIR [--dtype DTYPE]`: a run's trained policy as a full HF
folder (safetensors, config, tokenizer) that transformers and vLLM load like any model.

A LoRA run's adapter is merged into the base weights (W + alpha/r * B @ A); a full
fine-tuning run's weights are written as they are. The policy comes from the step's complete
checkpoint (the fp32 master copy) or, when there is none, from its published `weights/step_<n>`
(in the serving dtype). Without `--step`, the newest step either holds.
"""

import time
from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, find_run
from rlcore.errors import ConfigError
from rlcore.rundir import RunDir, steps_in

NAME = "export"
HELP = "the trained policy as a full HF folder (a LoRA adapter merged into the base)"
DTYPE_CHOICES = ("bfloat16", "float16", "float32")


def parser():
    parser = command_parser(NAME, HELP + "; the newest checkpoint or weights by default.")
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument("--out", type=Path, required=True, help="a new (or empty) folder")
    parser.add_argument("--step", type=int, default=None, help="the step to export")
    parser.add_argument("--dtype", choices=DTYPE_CHOICES, default=None,
                        help="the dtype to write (default: the serving dtype)")  # fmt: skip
    return parser


def trainer_config(run: RunDir):
    from rlcore.toml_io import load_toml
    from trainer.config import TrainerConfig

    path = run.config_file("trainer")
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {run.root} holds no trainer run to export")
    return TrainerConfig.model_validate(load_toml(path))


def pick_source(run: RunDir, step: int | None) -> tuple[int, str]:
    """(step, "checkpoint" or "weights"): a complete checkpoint wins over published weights."""
    checkpoints = [s for s in run.complete_checkpoints() if run.part_done(s, "trainer")]
    weights = [s for s in steps_in(run.weights) if run.weights_stable(s)]
    if step is None and (checkpoints or weights):
        step = max(checkpoints + weights)
    if step in checkpoints:
        return step, "checkpoint"
    if step in weights:
        return step, "weights"
    raise ConfigError(
        f"--step {step}: {run.root} has no complete checkpoint nor published weights of that "
        f"step (checkpoints: {checkpoints or 'none'}, weights: {weights or 'none'})"
        if step is not None
        else f"{run.root} has no complete checkpoint and no published weights to export"
    )


def check_out(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists: pick a new folder or delete it first")
    return out


def run(options) -> int:
    run = find_run(options.run)
    config = trainer_config(run)
    step, kind = pick_source(run, options.step)
    out = check_out(options.out)
    what = "LoRA adapter merged into the base" if config.lora else "fully fine-tuned model"
    print(f"rl: exporting step {step} ({what}, from its {kind}) of {run.root} to {out}")
    start = time.monotonic()
    dtype = export(config, run, step, kind, out, options.dtype)
    size = sum(f.stat().st_size for f in out.rglob("*.safetensors")) / 2**20
    print(f"rl: wrote {out} ({size:.0f} MB of {dtype} weights, {time.monotonic() - start:.1f} s)")
    return 0


def export(config, run: RunDir, step: int, kind: str, out: Path, dtype: str | None) -> str:
    """Load the base, restore the step's weights, merge a LoRA adapter and write `out`
    atomically; returns the dtype written."""
    import torch

    from rlcore.files import atomic_folder
    from rlcore.models import resolve_model
    from trainer.dist import World
    from trainer.lora import merge_lora
    from trainer.model import DTYPES, load_model, source_dir
    from trainer.train import quiet_libraries
    from trainer.weights import cast, copy_support_files, drop_tied_copies, fix_architectures

    quiet_libraries()
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    full_weights = kind == "weights" and config.lora is None
    source = str(run.weight_dir(step)) if full_weights else resolve_model(config.model.name)
    model = load_model(config.model, source, world, config.lora)
    if kind == "checkpoint":
        load_checkpoint_weights(model, run.part_dir(step, "trainer") / "dcp")
    elif config.lora is not None:
        load_adapter(model, run.weight_dir(step))
    merge_lora(model)
    target = DTYPES[dtype] if dtype else model.serving_dtype
    state = {k: cast(v.detach(), target) for k, v in model.state_dict().items()}
    state = drop_tied_copies(model, state)
    architectures = model.config.architectures
    with atomic_folder(out) as tmp:
        copy_support_files(source_dir(source), tmp, source)
        model.save_pretrained(tmp, state_dict=state)
        fix_architectures(tmp / "config.json", architectures, target)
    return str(target).removeprefix("torch.")


def load_checkpoint_weights(model, folder: Path) -> None:
    """The model part of a trainer checkpoint (all weights, or a LoRA model's adapter)."""
    import torch.distributed.checkpoint as dcp

    from trainer.lora import is_lora, trainable_names

    lora = is_lora(model)
    state = model.state_dict()
    if lora:
        state = {k: v for k, v in state.items() if k in trainable_names(model)}
    loaded = {"model": state}
    dcp.load(loaded, checkpoint_id=folder)
    model.load_state_dict(loaded["model"], strict=not lora)


def load_adapter(model, folder: Path) -> None:
    """A published PEFT adapter folder into the model's adapters."""
    from safetensors.torch import load_file

    from trainer.lora import ADAPTER_WEIGHTS, PEFT_PREFIX

    tensors = load_file(str(folder / ADAPTER_WEIGHTS))
    state = {k.removeprefix(PEFT_PREFIX): v.float() for k, v in tensors.items()}
    result = model.load_state_dict(state, strict=False)
    missing = [k for k in result.missing_keys if ".lora_" in k]
    if result.unexpected_keys or missing:
        raise ValueError(
            f"{folder / ADAPTER_WEIGHTS} does not match trainer.lora of this run "
            f"(unexpected {result.unexpected_keys[:3]}, missing {missing[:3]})"
        )
