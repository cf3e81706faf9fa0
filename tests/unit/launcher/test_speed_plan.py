"""`rl` resolves the trainer's `auto` speed choices once (launcher/speed.py): concrete values in
the trainer's config, one line in the start banner, a record for run.json; explicit settings
stand; `compile = true` without a compiler is refused before anything starts. The machines
are probe results (an H100 need not be here)."""

from dataclasses import replace

import pytest

from launcher.plan import Plan, derive_dtypes
from launcher.rl_config import RLConfig
from launcher.speed import derive_speed
from rlcore.config.entry import parse_config
from rlcore.errors import ConfigError
from rlcore.host.machine import Machine

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
H100 = replace(CPU, num_gpus=2, gpu_name="NVIDIA H100 80GB HBM3")
ON_CPU = {"trainer": [], "orchestrator": [], "inference": []}
ON_GPUS = {"trainer": [1], "orchestrator": [], "inference": [0]}


def plan_for(model_dir, machine, gpu_map, *flags) -> Plan:
    argv = ["--model.name", str(model_dir), *flags]
    config = parse_config(RLConfig, "rl", argv, sections=("trainer", "orchestrator", "inference"))[
        0
    ]
    derive_dtypes(config, gpu_map, machine)
    plan = Plan(config, gpu_map, machine=machine)
    derive_speed(plan)
    return plan


def test_the_quick_start_on_cpu_gets_concrete_choices(tiny_model_dir, monkeypatch):
    from launcher import memory

    monkeypatch.setattr(memory, "available_ram", lambda: 24 * 2**30)  # not the shared machine's
    plan = plan_for(tiny_model_dir, CPU, ON_CPU, "--max-steps", "25")
    model, optim = plan.config.trainer.model, plan.config.trainer.optim
    assert (model.compile, model.activation_checkpointing, optim.fused) == (False, False, False)
    line = [note for note in plan.dtypes if note.startswith("trainer speed: ")]
    assert line == [f"trainer speed: {plan.speed.describe()}"]
    assert "compile off (auto: " in line[0] and "AdamW foreach (auto: CUDA only)" in line[0]
    record = plan.speed.record()
    assert record["compile"] is False and record["compile_why"].startswith("auto: ")


@pytest.mark.parametrize(("steps", "want"), [(3, False), (1000, False), (10_000, True)])
def test_a_long_gpu_run_compiles_and_a_short_one_does_not(tiny_model_dir, steps, want):
    """The tiny model (3.2M parameters) at 16 completions of up to 16k tokens a step: by the
    recorded H100 figures, scaled to its size, a compile pays off after about 3,600 steps."""
    plan = plan_for(
        tiny_model_dir,
        H100,
        ON_GPUS,
        "--max-steps",
        str(steps),
        "--seq-len",
        "16384",
        "--orchestrator.batch-size",
        "16",
        "--orchestrator.sampling.max-tokens",
        "16384",
    )
    model = plan.config.trainer.model
    assert model.compile is want, plan.speed.compile_why
    assert plan.config.trainer.optim.fused is True


def test_explicit_settings_stand(tiny_model_dir):
    plan = plan_for(
        tiny_model_dir,
        H100,
        ON_GPUS,
        "--max-steps",
        "1000",
        "--seq-len",
        "16384",
        "--trainer.model.compile",
        "false",
        "--trainer.model.activation-checkpointing",
        "--trainer.optim.fused",
        "false",
    )
    model = plan.config.trainer.model
    assert (model.compile, model.activation_checkpointing) == (False, True)
    assert plan.config.trainer.optim.fused is False
    assert plan.speed.compile_why == plan.speed.checkpointing_why == "set in the config"


def test_compile_true_without_a_compiler_is_refused_before_start(tiny_model_dir):
    with pytest.raises(ConfigError, match="trainer.model.compile = true needs a C.. compiler"):
        plan_for(tiny_model_dir, replace(CPU, compiler=""), ON_CPU, "--trainer.model.compile")


def test_the_compile_choice_weighs_the_answers_the_job_measured(
    tiny_model_dir, tmp_path, monkeypatch
):
    """A long GPU run whose answers reach their 16k bound compiles; once its finished runs
    measured answers of 6 tokens, the same run's steps are too short for a compile to pay."""
    from launcher.forecast import answers_key
    from rlcore.forecast import answers
    from rlcore.host.models import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    flags = ["--max-steps", "10000", "--seq-len", "16384", "--orchestrator.batch-size", "16"]
    flags += ["--orchestrator.sampling.max-tokens", "16384"]
    plan = plan_for(tiny_model_dir, H100, ON_GPUS, *flags)
    assert plan.config.trainer.model.compile is True, plan.speed.compile_why
    record = answers.summarize([[([True] * 6, 40)] * 16])  # one step: 16 answers of 6 tokens
    answers.remember(answers_key(plan.config), record, 16384, 16384)
    plan = plan_for(tiny_model_dir, H100, ON_GPUS, *flags)
    assert plan.config.trainer.model.compile is False
    assert "would pay for itself only by step" in plan.speed.compile_why
