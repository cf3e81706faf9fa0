"""The trainer's speed choices on the loaded model (trainer/speed_policy.py decides; this module
feeds it the model's shape, the memory this process has and the run's length), the compile cache,
and what a compiled run measures of its own compile."""

import logging
import math
import os
from dataclasses import dataclass, field, replace

import torch

from rlcore.errors import ConfigError
from rlcore.forecast.memory import ModelShape, available_ram, trainer_peak
from rlcore.host.machine import DTYPE_BYTES, Machine
from rlcore.host.models import cache_dir
from trainer.config import TrainerModelConfig
from trainer.model_type import TrainerModel
from trainer.speed_policy import (
    COMPILE_FIGURES,
    RunShape,
    SpeedChoices,
    choose_checkpointing,
    choose_compile,
    choose_fused,
    compile_refusal,
    machine_kind,
)

logger = logging.getLogger("trainer")
CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass(frozen=True)
class TrainerRun(RunShape):
    """The run's shape as the trainer knows it, and what the memory estimate needs."""

    tokens_per_pass: int = 0
    shards: int = 1


def model_shape(model: TrainerModel) -> ModelShape:
    config = model.config.get_text_config()
    params = sum(p.numel() for p in model.parameters())
    return ModelShape(params, config.hidden_size, config.num_hidden_layers, config.vocab_size)


def device_memory(device: torch.device) -> float | None:
    """What this process may fill: its GPU's memory, or the machine's available memory."""
    if device.type == "cuda":
        return float(torch.cuda.get_device_properties(device).total_memory)
    ram = available_ram()
    return float(ram) if ram is not None else None


def adapter_params(model: torch.nn.Module) -> int | None:
    """The parameters that train where fewer than all do (LoRA adapters on a frozen base);
    None where every parameter trains (the memory estimate's `trainable`)."""
    params = list(model.parameters())
    trains = sum(p.numel() for p in params if p.requires_grad)
    return trains if trains < sum(p.numel() for p in params) else None


def choose(
    config: TrainerModelConfig,
    model: TrainerModel,
    device: torch.device,
    machine: Machine,
    run: TrainerRun | None,
    fused: bool | str = "auto",
) -> SpeedChoices:
    """The speed choices for `model` (loaded, not yet compiled or checkpointed) on `device`."""
    on_gpu, dtype = device.type == "cuda", str(model.compute_dtype).removeprefix("torch.")
    if config.compile is True and (refusal := compile_refusal(machine)):
        raise ConfigError(refusal)
    params = sum(p.numel() for p in model.parameters())
    shaped = None if run is None else replace(run, params=params)
    compile_on, compile_why = choose_compile(config.compile, on_gpu, dtype, machine, shaped)
    peak = None
    if run is not None:
        shape = model_shape(model)
        trainable = adapter_params(model)

        def peak(on: bool, every: int) -> float:
            parts = trainer_peak(
                shape,
                run.tokens_per_pass,
                DTYPE_BYTES[dtype],
                on,
                run.shards,
                trainable=trainable,
                head_chunk=config.logprob_chunk_tokens,
                checkpoint_freq=every,
                on_gpu=on_gpu,
            )
            if on_gpu:
                parts.pop("process")  # host memory, not the GPU's
            return sum(parts.values())

    layers = model.config.get_text_config().num_hidden_layers
    ac, freq, ac_why = choose_checkpointing(
        config.activation_checkpointing,
        config.activation_checkpointing_freq,
        layers,
        peak,
        device_memory(device) if run is not None else None,
    )
    fused_on, fused_why = choose_fused(fused, on_gpu)
    return SpeedChoices(
        compile_on,
        compile_why,
        ac,
        freq,
        ac_why,
        fused_on,
        fused_why,
        config.logprob_chunk_tokens,
        dtype,
    )


def use_compile_cache() -> str:
    """Point inductor's caches (FX graphs, autograd graphs, kernels) at the cache folder's
    `compile/`, unless the user named one: a resume or restart then compiles from cache.
    Importing transformers' models already sets the variable to torch's default (a folder in
    /tmp), read again at every use, so that value is taken as unset."""
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        torch_default = os.path.abspath(default_cache_dir())
    except ImportError:  # another torch: only an unset variable is ours to set
        torch_default = None
    if os.environ.get(CACHE_ENV) in (None, torch_default):
        os.environ[CACHE_ENV] = str(cache_dir() / "compile")
    return os.environ[CACHE_ENV]


@dataclass
class CompileClock:
    """Times a compiled run's first two steps: the first compiles, the second runs compiled.
    Their difference is the compile's time; with the eager/compiled ratio measured on this kind
    of machine it says by which step the compile has paid for itself."""

    kind: str
    start_step: int
    times: list[float] = field(default_factory=list)

    def observe(self, step: int, step_time_s: float) -> dict[str, float]:
        """After each step: once the second has run, the compile's figures (and a log line)."""
        if len(self.times) >= 2:
            return {}
        self.times.append(step_time_s)
        if len(self.times) < 2:
            return {}
        first, compiled = self.times
        compile_s = max(first - compiled, 0.0)
        figures = COMPILE_FIGURES.get(self.kind)
        ratio = figures.eager_step_s / figures.compiled_step_s if figures else None
        gain = compiled * (ratio - 1) if ratio else 0.0
        if gain <= 0:
            logger.info(
                f"compile: about {compile_s:.1f} s (first step {first:.2f} s, then "
                f"{compiled:.2f} s); no measured eager figure on {self.kind} to weigh it against"
            )
            return {"compile_s": compile_s}
        payoff = self.start_step + math.ceil(compile_s / gain)
        logger.info(
            f"compile: about {compile_s:.1f} s (first step {first:.2f} s, then {compiled:.2f} s);"
            f" eager steps measured {ratio:.2f}x as long on {self.kind}, so it has paid for "
            f"itself by step {payoff}"
        )
        return {"compile_s": compile_s, "compile_payoff_step": float(payoff)}


def compile_clock(
    model: TrainerModel, device: torch.device, start_step: int
) -> CompileClock | None:
    """A clock for a model whose layers compile, else None."""
    speed = getattr(model, "speed", None)
    if speed is None or not speed.compile:
        return None
    dtype = str(model.compute_dtype).removeprefix("torch.")
    return CompileClock(machine_kind(device.type == "cuda", dtype), start_step)
