"""The trainer's speed choices, made from the machine (rlcore/host/machine.py), the run's length and
the memory estimate (rlcore/forecast/memory.py), as `auto` dtypes are: the launcher makes them for a
run (and says them at start and in run.json), a trainer started alone makes them itself.

- torch.compile (`model.compile = auto`): on where it pays for itself within the run, that is
  where compile_s + steps x compiled_step_s < steps x eager_step_s, with the step times of
  `COMPILE_FIGURES` for this kind of machine scaled to the run's model and tokens per step.
  Never without a C++ compiler (inductor needs one, and Triton one for its launchers).
- Activation checkpointing (`model.activation_checkpointing = auto`): off where the estimate
  without it fits `MEMORY_SHARE` of the trainer's memory, else on for as few layers as fit
  (`activation_checkpointing_freq`), every layer where nothing fits.
- AdamW's fused kernel (`optim.fused = auto`): on CUDA (one kernel for all parameters).
- The loss head: chunked (`model.logprob_chunk_tokens`), its matmul in the compute dtype.

Explicit settings always win. Imports neither torch nor pydantic."""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

from rlcore.host.machine import Machine

MEMORY_SHARE = 0.9
"""Share of the trainer's memory the estimate may fill before `auto` checkpoints activations
(the estimate is within about 25% of measured peaks: benchmarks/README.md)."""


@dataclass(frozen=True)
class CompileFigures:
    """One reference job measured eager and compiled on one kind of machine."""

    eager_step_s: float
    compiled_step_s: float
    compile_s: float
    """Seconds the first compiled step took beyond a compiled step (a cold compile cache)."""
    params: int
    tokens: int
    """Tokens per step of the reference job."""
    source: str
    """Where and how it was measured."""

    def step_s(self, compiled: bool, params: int | None, tokens: int) -> float:
        """A step of `tokens` on a model of `params`, scaled from the reference (linear in
        both: the matmuls dominate)."""
        base = self.compiled_step_s if compiled else self.eager_step_s
        return base * (params or self.params) / self.params * tokens / self.tokens


QWEN3_06B_PARAMS = 596_049_920
SMOLLM2_135M_PARAMS = 134_515_008
COMPILE_FIGURES = {
    "gpu": CompileFigures(
        eager_step_s=16384 / 20640,
        compiled_step_s=16384 / 27119,
        compile_s=60.0,
        params=QWEN3_06B_PARAMS,
        tokens=16384,
        source="one H100 80GB, torch 2.11, Qwen3-0.6B shape, 8 x 2k packed, activation "
        "checkpointing (issue 55, 2026-11-27); compile_s assumed (not yet measured: "
        "benchmarks/gpu_suite.sh prints it)",
    ),
    "cpu-bfloat16": CompileFigures(
        eager_step_s=47.56,
        compiled_step_s=40.65,
        compile_s=212.7,
        params=SMOLLM2_135M_PARAMS,
        tokens=512,
        source="AMD EPYC Zen 4 (AVX512_BF16), 1 thread on 2 cores shared with other jobs (load "
        "8-13: about 10x a quiet step), torch 2.13, SmolLM2-135M, 8 x 64 tokens in one pass, "
        "eager and compiled steps alternating (benchmarks/compile_payoff.py, 2026-11-27)",
    ),
    "cpu-float32": CompileFigures(
        eager_step_s=45.02,
        compiled_step_s=63.76,
        compile_s=54.4,
        params=SMOLLM2_135M_PARAMS,
        tokens=512,
        source="the same EPYC and job as cpu-bfloat16, fp32 compute (AVX-512 kernels; an AVX2 "
        "CPU's own figures are not measured), 1 thread, load 8-13, 2026-11-27",
    ),
}
"""Measured per kind of machine (`machine_kind`); a kind without figures is not compiled by
`auto`. benchmarks/README.md has the runs."""


def machine_kind(on_gpu: bool, dtype: str) -> str:
    """`gpu`, or `cpu-<compute dtype>` (bf16 products and fp32 ones gain differently)."""
    return "gpu" if on_gpu else f"cpu-{dtype}"


@dataclass(frozen=True)
class RunShape:
    """What the choices need to know of the run."""

    max_steps: int
    tokens_per_step: int
    """Tokens a step trains on: a synthetic batch's, or under `rl` its completions, as the job's
    finished runs measured them, else at their bound (`batch_size` x `sampling.max_tokens`, at
    most `seq_len` each; each group's prompt, shared by its samples, adds a little:
    launcher/speed.py)."""
    params: int | None = None


def compile_refusal(machine: Machine) -> str | None:
    """Why `model.compile = true` cannot work here, or None."""
    if machine.compiler:
        return None
    return (
        "trainer.model.compile = true needs a C++ compiler (torch.compile's inductor builds "
        "its kernels with one) and none was found (the CXX variable, else g++ on PATH): "
        "install one (e.g. apt install g++) or set trainer.model.compile = auto"
    )


def payoff_step(figures: CompileFigures, run: RunShape) -> int | None:
    """The step by which a compile has paid for itself, or None when compiled steps are not
    faster."""
    gain = figures.step_s(False, run.params, run.tokens_per_step) - figures.step_s(
        True, run.params, run.tokens_per_step
    )
    return math.ceil(figures.compile_s / gain) if gain > 0 else None


def choose_compile(
    requested: bool | str, on_gpu: bool, dtype: str, machine: Machine, run: RunShape | None
) -> tuple[bool, str]:
    """(compile or not, why) for `model.compile` = `requested` (`auto` or a bool)."""
    if requested != "auto":
        return bool(requested), "set in the config"
    if run is None:
        return False, "auto: no training run"
    if not machine.compiler:
        return False, "auto: no C++ compiler here"
    kind = machine_kind(on_gpu, dtype)
    if not on_gpu and dtype == "bfloat16" and not machine.bf16_native:
        # the bf16 figures are a native-bf16 CPU's; emulated bf16 is unmeasured (and ~4x slower)
        return False, "auto: bf16 is not native on this CPU (no measured gain)"
    figures = COMPILE_FIGURES.get(kind)
    if figures is None:
        return False, f"auto: no measured gain on {kind}"
    step = payoff_step(figures, run)
    if step is None:
        return False, (
            f"auto: compiled steps measured no faster on {kind} ({figures.compiled_step_s:.2f} "
            f"s against {figures.eager_step_s:.2f} eager)"
        )
    if step <= run.max_steps:
        return True, f"auto: pays for itself by step ~{step} of {run.max_steps} on {kind}"
    return False, f"auto: would pay for itself only by step ~{step}, the run has {run.max_steps}"


def choose_checkpointing(
    requested: bool | str,
    freq: int,
    layers: int,
    peak: Callable[[bool, int], float] | None,
    memory: float | None,
) -> tuple[bool, int, str]:
    """(on, every n-th layer, why) for `model.activation_checkpointing` = `requested`; `peak`:
    the estimated peak in bytes with checkpointing (on, freq), `memory`: what the trainer has."""
    if requested != "auto":
        return bool(requested), freq, "set in the config"
    if peak is None or memory is None:
        return False, freq, "auto: memory not estimated"
    budget, gib = MEMORY_SHARE * memory, 2**30
    have = f"{memory / gib:.1f} GiB"
    without = peak(False, 1)
    if without <= budget:
        return False, freq, f"auto: the estimate without it, {without / gib:.1f} GiB, fits {have}"
    for every in range(max(layers, 1), 0, -1):  # fewest recomputed layers first
        if (need := peak(True, every)) <= budget:
            return (
                True,
                every,
                (
                    f"auto: {without / gib:.1f} GiB without it exceed {MEMORY_SHARE:.0%} of "
                    f"{have}; recomputing every {every}-th layer: {need / gib:.1f} GiB"
                ),
            )
    return (
        True,
        1,
        (
            f"auto: even recomputing every layer the estimate, {peak(True, 1) / gib:.1f} GiB, "
            f"exceeds {have}"
        ),
    )


def choose_fused(requested: bool | str, on_gpu: bool) -> tuple[bool, str]:
    """(AdamW's fused kernel or not, why) for `optim.fused` = `requested`."""
    if requested != "auto":
        return bool(requested), "set in the config"
    return on_gpu, "auto: on CUDA" if on_gpu else "auto: CUDA only"


@dataclass(frozen=True)
class SpeedChoices:
    """What the trainer runs with, and why each was chosen."""

    compile: bool
    compile_why: str
    checkpointing: bool
    checkpointing_freq: int
    checkpointing_why: str
    fused: bool
    fused_why: str
    head_chunk: int | None
    head_dtype: str

    def describe(self) -> str:
        """One line: each choice and why."""
        every = self.checkpointing_freq
        ac = "off" if not self.checkpointing else "on" if every == 1 else f"every {every}-th layer"
        head = (
            f"chunked, {self.head_chunk} tokens" if self.head_chunk else "full logits"
        ) + f", {self.head_dtype} matmul"
        return (
            f"compile {'on' if self.compile else 'off'} ({self.compile_why}); activation "
            f"checkpointing {ac} ({self.checkpointing_why}); AdamW "
            f"{'fused' if self.fused else 'foreach'} ({self.fused_why}); loss head {head}"
        )

    def record(self) -> dict:
        """What run.json keeps (`speed_choices`)."""
        return asdict(self)
