"""`rl export RUN [--step N] --out DIR [--dtype DTYPE]`: a run's trained policy as a full HF
folder (safetensors, config, tokenizer) that transformers and vLLM load like any model.

A LoRA run's adapter is merged into the base weights (W + alpha/r * B @ A); a full
fine-tuning run's weights are written as they are. The policy comes from the step's complete
checkpoint (the fp32 master copy) or, when there is none, from its published `weights/step_<n>`
(in the serving dtype). Without `--step`, the newest step either holds.
"""

import subprocess
import sys
import time
from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, find_run
from launcher.lockfile import check_writable
from rlcore.errors import ConfigError
from rlcore.files.paths import path_arg
from rlcore.files.readback import shown
from rlcore.processes import children
from rlcore.runs.rundir import RunDir, steps_in
from rlcore.runs.runguard import writing_into

NAME = "export"
HELP = "the trained policy as a full HF folder (a LoRA adapter merged into the base)"
DTYPE_CHOICES = ("bfloat16", "float16", "float32")


def parser():
    parser = command_parser(NAME, HELP + "; the newest checkpoint or weights by default.")
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument(
        "--out",
        type=path_arg("--out"),
        required=True,
        help="a new (or empty) folder (in a run: not while rl runs)",
    )
    parser.add_argument("--step", type=int, default=None, help="the step to export")
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default=None,
        help="the dtype to write (default: the serving dtype)",
    )
    return parser


def trainer_config(run: RunDir):
    """The trainer's (or an `rl sft` run's) config the run recorded, read back bounded
    (rlcore.config.toml_io); one that is not such a config is a damaged run folder, never a
    traceback."""
    from pydantic import BaseModel, ValidationError

    from rlcore.config.toml_io import load_toml
    from trainer.config import TrainerConfig

    path = run.config_file("trainer")
    model: type[BaseModel] = TrainerConfig
    if not path.is_file() and run.config_file("sft").is_file():
        from trainer.sft.config import SFTConfig

        path, model = run.config_file("sft"), SFTConfig
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: {run.root} holds no trainer run to export")
    try:
        return model.model_validate(load_toml(path))
    except ValidationError as err:
        where = shown(path.relative_to(run.root))
        why = f"not a config rl wrote ({err.error_count()} problems)"
        raise ConfigError(f"damaged run folder: {where}: {why}") from None


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
    """A new or empty folder whose parent can be written (the export goes to a sibling first),
    checked before the export starts."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError(f"--out {out} already exists: pick a new folder or delete it first")
    check_writable(out, "--out", folder=True)
    return out


def run(options) -> int:
    run = find_run(options.run)
    config = trainer_config(run)
    step, kind = pick_source(run, options.step)
    out = check_out(options.out)
    what = "LoRA adapter merged into the base" if config.lora else "fully fine-tuned model"
    print(f"rl: exporting step {step} ({what}, from its {kind}) of {run.root} to {out}")
    start = time.monotonic()
    with writing_into(out, "--out"):  # in a run: under its lock (rlcore.runs.runguard)
        dtype = run_export(run, step, kind, out, options.dtype)
    size = sum(f.stat().st_size for f in out.rglob("*.safetensors")) / 2**20
    print(f"rl: wrote {out} ({size:.0f} MB of {dtype} weights, {time.monotonic() - start:.1f} s)")
    return 0


def run_export(run: RunDir, step: int, kind: str, out: Path, dtype: str | None) -> str:
    """The trainer's export (trainer/export.py) in its own process; the dtype it wrote."""
    command = [sys.executable, "-m", "trainer.export", str(run.root), str(step), kind, str(out)]
    done = children.run([*command, *([dtype] if dtype else [])], stdout=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise ConfigError(f"the export failed (exit code {done.returncode}); see the lines above")
    return done.stdout.strip().splitlines()[-1]
