"""`python -m trainer.export RUN_DIR STEP KIND OUT [DTYPE]`: the heavy half of `rl export`
(which checks the arguments and runs this): load the base model, restore a step's weights from
its checkpoint or its published folder, merge a LoRA adapter, write a full HF folder."""

import sys
from pathlib import Path

from rlcore.config.toml_io import load_toml
from rlcore.runs.rundir import RunDir
from trainer.config import TrainerConfig


def export(config, run: RunDir, step: int, kind: str, out: Path, dtype: str | None) -> str:
    """Load the base, restore the step's weights, merge a LoRA adapter and write `out`
    atomically; returns the dtype written."""
    import torch

    from rlcore.files.atomic import atomic_folder
    from rlcore.host.models import resolve_model
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


def run_config(run: RunDir):
    """The run's trainer config, or its SFT config (the same `model` and `lora` keys)."""
    if run.config_file("trainer").is_file():
        return TrainerConfig.model_validate(load_toml(run.config_file("trainer")))
    from trainer.sft.config import SFTConfig

    return SFTConfig.model_validate(load_toml(run.config_file("sft")))


def main(argv: list[str] | None = None) -> None:
    run_dir, step, kind, out, *dtype = sys.argv[1:] if argv is None else argv
    run = RunDir(run_dir)
    config = run_config(run)
    written = export(config, run, int(step), kind, Path(out), dtype[0] if dtype else None)
    print(written)


if __name__ == "__main__":
    main()
