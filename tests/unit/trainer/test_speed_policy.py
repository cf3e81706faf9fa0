"""The trainer's speed choices (trainer/speed_policy.py): which path `auto` takes on which machine
and for which run length, from the measured figures and the memory estimate; explicit settings
always win. The machines are probe results for hardware that need not be here (an H100, an
AVX2 CPU, a machine without a compiler): the probe's own tests read real flags."""

from dataclasses import replace

import pytest

from rlcore.forecast.memory import ModelShape, trainer_peak
from rlcore.host.machine import Machine
from trainer.speed_policy import (
    COMPILE_FIGURES,
    QWEN3_06B_PARAMS,
    SMOLLM2_135M_PARAMS,
    RunShape,
    choose_checkpointing,
    choose_compile,
    choose_fused,
    compile_refusal,
    payoff_step,
)

GIB = 2**30
CPU = Machine(
    arch="x86_64",
    vendor="AuthenticAMD",
    model="AMD EPYC",
    isa="avx512_bf16",
    hardware_isa="avx512_bf16",
    capped_by="",
    bf16_matmul=True,
    bf16_native=True,
    num_cpus=2,
    memory_gib=24,
    num_gpus=0,
    gpu_name="",
    compiler="/usr/bin/g++",
)
H100 = replace(CPU, num_gpus=1, gpu_name="NVIDIA H100 80GB HBM3", num_cpus=16, memory_gib=128)
AVX2 = replace(CPU, isa="avx2", hardware_isa="avx2", bf16_matmul=False, bf16_native=False)
NO_COMPILER = replace(H100, compiler="")

LONG_GPU_RUN = RunShape(max_steps=1000, tokens_per_step=16384, params=QWEN3_06B_PARAMS)
SHORT_GPU_RUN = replace(LONG_GPU_RUN, max_steps=3)
LONG_CPU_RUN = RunShape(max_steps=1000, tokens_per_step=512, params=SMOLLM2_135M_PARAMS)
SHORT_CPU_RUN = replace(LONG_CPU_RUN, max_steps=3)
CPU_PAYS = payoff_step(COMPILE_FIGURES["cpu-bfloat16"], LONG_CPU_RUN) is not None


@pytest.mark.parametrize(
    ("machine", "on_gpu", "dtype", "run", "want", "why"),
    [
        (H100, True, "bfloat16", LONG_GPU_RUN, True, "pays for itself by step"),
        (H100, True, "bfloat16", SHORT_GPU_RUN, False, "the run has 3"),
        (CPU, False, "bfloat16", LONG_CPU_RUN, CPU_PAYS, "cpu-bfloat16"),
        (CPU, False, "bfloat16", SHORT_CPU_RUN, False, "cpu-bfloat16" if not CPU_PAYS else "has 3"),
        (AVX2, False, "float32", LONG_CPU_RUN, False, "measured no faster on cpu-float32"),
        (H100, False, "float16", LONG_CPU_RUN, False, "no measured gain on cpu-float16"),
        (NO_COMPILER, True, "bfloat16", LONG_GPU_RUN, False, "no C++ compiler"),
        (H100, True, "bfloat16", None, False, "no training run"),
    ],
    ids=[
        "h100-1000-steps",
        "h100-3-steps",
        "bf16-cpu-1000",
        "bf16-cpu-3",
        "avx2-cpu",
        "fp16-cpu",
        "no-compiler",
        "no-run",
    ],
)
def test_auto_compiles_where_it_pays_within_the_run(machine, on_gpu, dtype, run, want, why):
    chosen, reason = choose_compile("auto", on_gpu, dtype, machine, run)
    assert chosen is want and reason.startswith("auto: ") and why in reason, reason


def test_auto_never_compiles_bf16_a_cpu_only_emulates():
    """The bf16 figures come from a native-bf16 CPU; an AVX2 CPU told to compute in bf16 has
    none, however long the run."""
    compiled, why = choose_compile("auto", False, "bfloat16", AVX2, LONG_CPU_RUN)
    assert not compiled and "not native" in why, why
    assert choose_compile("auto", False, "bfloat16", CPU, LONG_CPU_RUN)[0]


@pytest.mark.parametrize("machine", [H100, CPU, AVX2, NO_COMPILER], ids=lambda m: m.isa)
@pytest.mark.parametrize("run", [LONG_GPU_RUN, SHORT_CPU_RUN, None])
@pytest.mark.parametrize("requested", [True, False])
def test_an_explicit_compile_setting_wins(machine, run, requested):
    chosen, why = choose_compile(requested, bool(machine.num_gpus), "bfloat16", machine, run)
    assert chosen is requested and why == "set in the config"


def test_the_gpu_payoff_follows_the_recorded_figures():
    """compile_s + n x compiled < n x eager first holds at the step payoff_step returns."""
    figures = COMPILE_FIGURES["gpu"]
    n = payoff_step(figures, LONG_GPU_RUN)
    eager, compiled = (figures.step_s(c, QWEN3_06B_PARAMS, 16384) for c in (False, True))
    assert figures.compile_s + n * compiled <= n * eager
    assert figures.compile_s + (n - 1) * compiled > (n - 1) * eager
    for steps, want in ((n, True), (n - 1, False)):
        run = replace(LONG_GPU_RUN, max_steps=steps)
        assert choose_compile("auto", True, "bfloat16", H100, run)[0] is want


def test_compile_true_without_a_compiler_is_refused_with_the_fix():
    message = compile_refusal(NO_COMPILER)
    assert "trainer.model.compile = true" in message and "g++" in message
    assert "trainer.model.compile = auto" in message
    assert compile_refusal(H100) is None


def step_peak(without: float, per_layer: float, layers: int):
    """A model whose peak is `without` bytes with no checkpointing and falls by `per_layer` for
    each recomputed layer (every n-th of `layers`)."""
    return lambda on, every: without - (per_layer * -(-layers // every) if on else 0)


@pytest.mark.parametrize(
    ("memory_gib", "want", "freq", "why"),
    [
        (80, False, 1, "fits 80.0 GiB"),  # 60 GiB fit 90% of 80
        (64, True, 27, "every 27-th layer"),  # 2 of 28 layers recomputed: 57 <= 57.6
        (45, True, 2, "every 2-th layer"),  # 14 recomputed: 39 <= 40.5; 10 (every 3rd): 45
        (15, True, 1, "even recomputing every layer"),  # 18 > 13.5: the memory check warns
    ],
    ids=["fits", "two-layers", "half", "nothing-fits"],
)
def test_auto_checkpointing_recomputes_only_what_memory_needs(memory_gib, want, freq, why):
    """60 GiB without recomputation, 1.5 GiB less for each of 28 layers recomputed."""
    peak = step_peak(60 * GIB, 1.5 * GIB, 28)
    on, every, reason = choose_checkpointing("auto", 1, 28, peak, memory_gib * GIB)
    assert (on, every) == (want, freq) and reason.startswith("auto: ") and why in reason, reason


@pytest.mark.parametrize("requested", [True, False])
def test_an_explicit_checkpointing_setting_wins(requested):
    peak = step_peak(60 * GIB, 1.5 * GIB, 28)
    for memory in (20 * GIB, 80 * GIB, None):
        on, every, why = choose_checkpointing(requested, 3, 28, peak, memory)
        assert (on, every, why) == (requested, 3, "set in the config")


def test_checkpointing_stays_off_where_memory_is_not_known():
    assert choose_checkpointing("auto", 1, 28, None, None)[0] is False


def qwen3_peak(tokens: int):
    shape = ModelShape(QWEN3_06B_PARAMS, 1024, 28, 151936)
    return lambda on, every: sum(
        trainer_peak(shape, tokens, 2, on, head_chunk=2048, checkpoint_freq=every).values()
    )  # the GPU's terms: no host process


@pytest.mark.parametrize(
    ("tokens", "memory_gib", "want"),
    [(16384, 80, False), (16384, 40, True), (65536, 80, True), (2048, 24, False)],
)
def test_the_estimate_decides_for_a_qwen3_shape(tokens, memory_gib, want):
    """With the real estimate: 16k tokens of a Qwen3-0.6B shape fit an 80 GiB GPU without
    recomputation, not a 40 GiB one; 64k tokens need it on 80 GiB."""
    on, every, why = choose_checkpointing("auto", 1, 28, qwen3_peak(tokens), memory_gib * GIB)
    assert on is want, why


@pytest.mark.parametrize(
    ("requested", "on_gpu", "want"),
    [("auto", True, True), ("auto", False, False), (True, False, True), (False, True, False)],
)
def test_fused_adamw_on_cuda_unless_set(requested, on_gpu, want):
    assert choose_fused(requested, on_gpu)[0] is want


def test_the_payoff_steps_computed_by_hand():
    """Literal values, worked out from the recorded figures: on the H100 a step of the reference
    job takes 16384/20640 = 0.7938 s eager and 16384/27119 = 0.6042 s compiled, so 60 s of
    compiling is paid back after 60 / 0.1896 = 316.4 steps (317); on the bf16 CPU, 212.7 s
    against 47.56 - 40.65 = 6.91 s a step: 30.8 steps (31)."""
    assert payoff_step(COMPILE_FIGURES["gpu"], LONG_GPU_RUN) == 317
    assert payoff_step(COMPILE_FIGURES["cpu-bfloat16"], LONG_CPU_RUN) == 31
    doubled = COMPILE_FIGURES["cpu-bfloat16"].step_s(False, 2 * SMOLLM2_135M_PARAMS, 1024)
    assert doubled == pytest.approx(4 * 47.56)  # linear in parameters and in tokens
