"""The estimate of an evaluation (`evals` with a server of its own): the server's start and its
first requests' warm-up, each environment's rollouts generated through it one environment after
the other (model.py's generation terms), the stop; the server's peak memory and the
evaluation's; the disk its results take. Pure arithmetic, as model.py: the tests check it
against hand-computed values."""

from dataclasses import replace

from rlcore.forecast.calibrate import Speeds
from rlcore.forecast.model import (
    END_IMPORTS,
    FIRST_STEP_EXTRA,
    GIB,
    ORCHESTRATOR_BASE,
    SHORT_ANSWERS,
    WALL_RANGE,
    Forecast,
    Job,
    generate_s,
    inference_memory,
)
from rlcore.forecast.shape import ModelShape

EVALS_START_IMPORTS = 7.0
"""From the server's start to the first request (its imports and vLLM engine, a deterministic
server's measurement of its kernels' batch-invariant row counts, the environments loaded) in
units of the CPU time `import torch` measured; the weights' load is added apart (fitted on
evaluations of the tiny model and SmolLM2-135M: 4.5-7.5 units; benchmarks/README.md)."""
EVALS_HOST_ON_GPU = 0.3 * GIB
"""The server's host memory when it serves from a GPU."""
RESULT_BYTES_PER_TOKEN = 3.0
"""results.jsonl bytes per prompt and answer token (the messages' text as JSON; a prompt's
chat template is not written)."""
RESULT_BYTES_PER_ROLLOUT = 180.0
"""A results.jsonl line's fixed part (environment, indices, reward, metrics, the keys)."""
EVALS_FILES_BYTES = 19_000.0
"""eval.toml, inference.toml, summary.json, the server's folder and its log (regular files,
as `rlcore.files.disk_use` counts a folder)."""


def evals_start_s(shape: ModelShape, speeds: Speeds) -> float:
    """The start: imports and the server's engine (in import units), and the weights' load."""
    load = shape.params * 4 / speeds.copy_bytes * 4
    return EVALS_START_IMPORTS * speeds.import_s + load


def warmup_s(jobs: dict[str, Job], shape: ModelShape, speeds: Speeds) -> float:
    """The server's first requests build its kernels and fill its caches: one more wave of the
    first environment's rollouts (as a run's first step: model.FIRST_STEP_EXTRA)."""
    first = next(iter(jobs.values()))
    wave = replace(first, rollouts=min(first.rollouts, first.max_concurrent))
    return FIRST_STEP_EXTRA * generate_s(wave, shape, speeds, wave.answer_mean)


def with_answers(job: Job, share: float) -> Job:
    """`job` were every answer `share` of `answer_tokens` long."""
    return replace(job, answer_tokens=max(round(job.answer_tokens * share), 1), answer_fill=1.0)


def evaluate_s(jobs: dict[str, Job], shape: ModelShape, speeds: Speeds) -> dict[str, float]:
    """Seconds per environment: its rollouts generated as one batch (`Job.rollouts`: examples x
    rollouts per example), in waves of `max_concurrent`."""
    return {name: generate_s(job, shape, speeds, job.answer_mean) for name, job in jobs.items()}


def evals_wall_s(jobs: dict[str, Job], shape: ModelShape, speeds: Speeds, slowdown: float) -> float:
    """Start, every environment and the stop; CPU work stretched by `slowdown`."""
    on_gpu = any(job.on_gpu for job in jobs.values())
    generate = sum(evaluate_s(jobs, shape, speeds).values()) + warmup_s(jobs, shape, speeds)
    start = evals_start_s(shape, speeds) * slowdown
    return start + generate * (1.0 if on_gpu else slowdown) + END_IMPORTS * speeds.import_s


def results_bytes(jobs: dict[str, Job]) -> float:
    """results.jsonl: one line per rollout, its prompts and answers as text."""
    total = 0.0
    for job in jobs.values():
        tokens = (job.prompt_tokens + job.answer_mean) * job.turns
        total += job.rollouts * (tokens * RESULT_BYTES_PER_TOKEN + RESULT_BYTES_PER_ROLLOUT)
    return total


def evals_estimate(
    jobs: dict[str, Job], shape: ModelShape, speeds: Speeds, slowdown: float = 1.0
) -> Forecast:
    """The whole estimate of an evaluation of `jobs` (by environment label) on this machine;
    `slowdown` stretches the CPU's work on a shared machine (on a GPU only the start)."""
    first = next(iter(jobs.values()))
    stretch = 1.0 if first.on_gpu else slowdown
    phases = {name: s * stretch for name, s in evaluate_s(jobs, shape, speeds).items()}
    warmup = warmup_s(jobs, shape, speeds) * stretch
    start = evals_start_s(shape, speeds) * slowdown + warmup
    end = END_IMPORTS * speeds.import_s
    low = {name: with_answers(job, SHORT_ANSWERS) for name, job in jobs.items()}
    high = {name: with_answers(job, 1.0) for name, job in jobs.items()}
    server = EVALS_HOST_ON_GPU if first.on_gpu else inference_memory(first, shape)
    memory = {"inference": server, "evals": ORCHESTRATOR_BASE}
    wall = start + sum(phases.values()) + end
    return Forecast(
        phases=phases,
        step_s=sum(phases.values()),
        start_s=start,
        end_s=end,
        wall_s=wall,
        wall_range=(
            WALL_RANGE[0] * evals_wall_s(low, shape, speeds, slowdown),
            WALL_RANGE[1] * evals_wall_s(high, shape, speeds, slowdown),
        ),
        memory=memory,
        machine_memory=sum(memory.values()),
        disk={"results": results_bytes(jobs), "configs and logs": EVALS_FILES_BYTES},
    )
