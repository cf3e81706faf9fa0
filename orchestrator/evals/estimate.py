"""The estimate `evals` prints before its own server starts (rlcore/forecast/evals.py): the time
to evaluate (the start, each environment's rollouts through the server, the stop), the server's
peak memory (weights, oneDNN's packed copy, the KV cache) and the evaluation's, and the disk its
results take. It never stops the evaluation (one line says why when it cannot be made) and
writes nothing: a new measurement of this machine is cached once the server is ready."""

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.summary import eval_labels
from rlcore.config.base import CPU_KVCACHE_SPACE_GIB
from rlcore.forecast.evals import evals_estimate
from rlcore.forecast.model import GIB, PROMPT_TOKENS, Forecast, Job
from rlcore.forecast.progress import duration
from rlcore.forecast.report import (
    block_tokens,
    environment_turns,
    gib,
    measured_speeds,
    measured_when,
    shared,
)
from rlcore.forecast.shape import ModelShape, shape_of
from rlcore.host.machine import DTYPE_BYTES, Machine, probe, serving_dtypes


def evals_forecast(config: EvalsConfig, model: str) -> tuple[Forecast | None, list[str]]:
    """The estimate of evaluating `model` (a name or folder) with `config`, and its block's
    lines; (None, [one line saying why]) when it cannot be made. Never raises."""
    if config.client.base_url:
        return None, [
            "Estimate: not made (client.base_url: the server runs elsewhere, its speed is not "
            "measured here)"
        ]
    try:
        return _evals_forecast(config, model)
    except Exception as err:  # noqa: BLE001  (an estimate never stops an evaluation)
        return None, [f"Estimate: not made ({type(err).__name__}: {str(err)[:160]})"]


def _evals_forecast(config: EvalsConfig, model: str) -> tuple[Forecast | None, list[str]]:
    shape, source = shape_of(model)
    if shape is None:
        return None, [f"Estimate: not made ({source})"]
    machine = probe()
    jobs = evals_jobs(config, machine)
    first = next(iter(jobs.values()))
    dtypes = sorted({first.decode_dtype})
    found, why = measured_speeds(machine, dtypes, "cuda" if first.on_gpu else "cpu")
    if found is None:
        return None, [f"Estimate: not made ({why})"]
    slowdown, busy = shared(machine)
    result = evals_estimate(jobs, shape, found, slowdown)
    result.speeds = found
    result.basis = evals_basis(shape, source, config, found) + busy
    return result, describe_evals(result, jobs, machine.memory_gib)


def evals_jobs(config: EvalsConfig, machine: Machine) -> dict[str, Job]:
    """Each [[eval.env]] as the estimate sees it, by its label in the results."""
    on_gpu = machine.num_gpus > 0
    settings = config.inference
    model_dtype = settings.get("model", {}).get("dtype", "auto")
    matmul = settings.get("cpu", {}).get("matmul_dtype", "auto")
    served, matmul = serving_dtypes(model_dtype, matmul, on_gpu, machine)
    kv = 0.0 if on_gpu else settings.get("cpu", {}).get("kvcache_space_gib", CPU_KVCACHE_SPACE_GIB)
    labels = eval_labels([e.id for e in config.eval.env])
    jobs = {}
    for label, env in zip(labels, config.eval.env, strict=True):
        turns = environment_turns(env.id, env.args)
        jobs[label] = Job(
            max_steps=1,
            rollouts=env.num_examples * env.rollouts_per_example,
            rollouts_per_example=env.rollouts_per_example,
            prompt_tokens=PROMPT_TOKENS,
            answer_tokens=min(config.sampling.max_tokens, config.seq_len),
            turns=(1 + turns) / 2,
            max_turns=turns,
            seq_len=config.seq_len,
            decode_dtype=served if matmul == "model" else matmul,
            served_bytes=DTYPE_BYTES.get(served, 4),
            served_dtype=served,
            max_concurrent=config.client.max_concurrent,
            block_tokens=block_tokens(settings.get("vllm_args", {}), on_gpu),
            on_gpu=on_gpu,
            kv_cache_bytes=float(kv) * GIB,
            archive=False,
        )
    return jobs


def evals_basis(shape: ModelShape, source: str, config: EvalsConfig, found) -> list[str]:
    """What the estimate rests on, one phrase each."""
    rates = ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in sorted(found.matmul_flops.items()))
    envs = "; ".join(
        f"{e.id}: up to {e.num_examples} examples x {e.rollouts_per_example} rollouts"
        for e in config.eval.env
    )
    when = measured_when(found, False, "its server is ready")
    return [
        f"model {shape.params / 1e6:.0f}M parameters, {shape.layers} layers, hidden "
        f"{shape.hidden}, vocabulary {shape.vocab} (from {source})",
        f"{envs}; ~{PROMPT_TOKENS} prompt + up to {config.sampling.max_tokens} answer tokens, "
        f"{config.client.max_concurrent} requests at once",
        f"this machine: {rates} ({when}; fingerprint {found.fingerprint})",
    ]


def describe_evals(result: Forecast, jobs: dict[str, Job], machine_gib: float | None) -> list[str]:
    """The block's lines."""
    low, high = result.wall_range
    per_env = ", ".join(f"{name} {duration(s)}" for name, s in result.phases.items())
    memory = ", ".join(f"{name} {gib(v)}" for name, v in result.memory.items())
    have = f" of {machine_gib:.0f} GiB" if machine_gib else ""
    parts = ", ".join(f"{name} {gib(v)}" for name, v in result.disk.items() if v)
    rollouts = sum(job.rollouts for job in jobs.values())
    lines = [
        "Estimate (from the model's shape, the evaluation and this machine's measured speed):",
        f"  evaluate: ~{duration(result.wall_s)} for {rollouts} rollouts ({duration(low)} to "
        f"{duration(high)}; start {duration(result.start_s)}, {per_env})",
        f"  peak memory: {memory}; machine {gib(result.machine_memory)}{have}",
        f"  disk at the end: {gib(result.disk_total)} ({parts})",
    ]
    return lines + [f"  basis: {line}" for line in result.basis]
