"""The estimate block `rl` prints before anything starts (and `--dry-run` shows): time per step
by phase and the whole run's wall time with a range, each process's peak memory against the
machine's, the disk at the end, GPU-hours and their price. The figures come from
rlcore/forecast (the model's shape, the job from the config, this machine's measured speed);
an estimate that cannot be made says why in one line and never stops the run."""

import ast
import importlib.util
from pathlib import Path

from rlcore.forecast.calibrate import CALIBRATION_ENV, CalibrationError, speeds
from rlcore.forecast.model import DTYPE_BYTES, GIB, PROMPT_TOKENS, Forecast, Job, estimate
from rlcore.forecast.progress import duration
from rlcore.forecast.shape import ModelShape, shape_of


def environment_turns(env_id: str, args: dict) -> int:
    """An environment's most turns: its `max_turns` argument, else the default of its
    `load_environment(max_turns=...)` read from the installed source (never imported), else 1."""
    if isinstance(args.get("max_turns"), int):
        return max(args["max_turns"], 1)
    try:
        spec = importlib.util.find_spec(env_id.replace("-", "_"))
        origin = spec.origin if spec else None
        tree = ast.parse(Path(origin).read_text()) if origin else None
    except (ImportError, ValueError, OSError, SyntaxError):
        return 1
    for node in ast.walk(tree) if tree else []:
        if isinstance(node, ast.FunctionDef) and node.name == "load_environment":
            names = [a.arg for a in node.args.args]
            tail = names[len(names) - len(node.args.defaults) :]
            defaults = dict(zip(tail, node.args.defaults, strict=True))
            value = defaults.get("max_turns")
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                return max(value.value, 1)
    return 1


def checkpoint_counts(ckpt, max_steps: int) -> tuple[int, int]:
    """(checkpoints saved, kept at the end) under the `ckpt` rules (every `interval` steps and
    after the last; `keep` of them)."""
    if not ckpt.enabled:
        return 0, 0
    saved = max_steps // ckpt.interval if ckpt.interval else 0
    saved += 0 if ckpt.interval and max_steps % ckpt.interval == 0 else 1
    return saved, min(saved, ckpt.keep) if ckpt.keep is not None else saved


def lora_trainable(lora, shape: ModelShape) -> int | None:
    """Adapter parameters: two rank x hidden matrices per target per layer (as launcher.memory)."""
    if lora is None:
        return None
    return 2 * lora.rank * shape.hidden * len(lora.target_modules) * shape.layers


def rl_job(plan, shape: ModelShape) -> Job:
    """The `rl` run of `plan` as the estimate sees it."""
    from launcher.memory import estimate_parts, gpu_memory

    config = plan.config
    trainer, orch, inference = config.trainer, config.orchestrator, config.inference
    gpus = plan.gpu_map.get("trainer") or []
    inference_gpus = [g for n in plan.inference_names for g in plan.gpu_map.get(n, [])]
    turns = max(environment_turns(e.id, e.args) for e in orch.env) if orch.env else 1
    saved, kept = checkpoint_counts(trainer.ckpt, trainer.max_steps)
    matmul = inference.cpu.matmul_dtype
    served = inference.model.dtype if inference.model.dtype != "auto" else "float32"
    decode = served if plan.gpu_map.get("inference") or matmul in ("model", "auto") else matmul
    ac = trainer.model.activation_checkpointing is True
    peak = estimate_parts(
        config, plan.gpu_map, shape, ac, trainer.model.activation_checkpointing_freq
    )
    kv = 0.0 if inference_gpus else inference.cpu.kvcache_space_gib * GIB
    return Job(
        max_steps=trainer.max_steps, rollouts=orch.batch_size,
        rollouts_per_example=orch.rollouts_per_example, prompt_tokens=PROMPT_TOKENS,
        answer_tokens=min(orch.sampling.max_tokens, orch.seq_len),
        turns=(1 + turns) / 2, max_turns=turns, seq_len=orch.seq_len,
        async_level=trainer.async_level, train_dtype=trainer.model.dtype, decode_dtype=decode,
        served_bytes=DTYPE_BYTES.get(served, 4), trainable=lora_trainable(trainer.lora, shape),
        micro_batch_tokens=trainer.tokens_per_pass(on_cpu=not gpus),
        max_concurrent=orch.client.max_concurrent, on_gpu=bool(gpus), trainer_gpus=len(gpus),
        inference_gpus=len(inference_gpus), gpu_memory_bytes=float(gpu_memory(gpus) or 0),
        kv_cache_bytes=kv, inference_replicas=inference.replicas, checkpoints_kept=kept,
        checkpoints_saved=saved,
        policy_folders=trainer.weight_transfer.num_policy_folders(trainer.async_level) - 1
        if trainer.weight_transfer.copies_in_background() else 0,
        archive=orch.samples.keep, trainer_peak=sum(peak.values()),
    )  # fmt: skip


def measured_speeds(machine, dtypes: list[str]):
    """This machine's speeds (cached per fingerprint), or (None, why)."""
    import os

    if os.environ.get(CALIBRATION_ENV, "").lower() == "off":
        return None, f"the speed measurement is off ({CALIBRATION_ENV}=off)"
    try:
        return speeds(machine.record(), dtypes), ""
    except CalibrationError as err:
        return None, str(err)


def forecast(plan) -> tuple[Forecast | None, list[str]]:
    """The estimate for `plan` and its block's lines; (None, [one line saying why]) when it
    cannot be made. Never raises."""
    try:
        return _forecast(plan)
    except Exception as err:  # noqa: BLE001  (an estimate never stops a run)
        return None, [f"Estimate: not made ({type(err).__name__}: {str(err)[:160]})"]


def _forecast(plan) -> tuple[Forecast | None, list[str]]:
    config = plan.config
    shape, source = shape_of(config.trainer.model.name)
    if shape is None:
        return None, [f"Estimate: not made ({source})"]
    job = rl_job(plan, shape)
    found, why = measured_speeds(plan.machine, sorted({job.train_dtype, job.decode_dtype}))
    if found is None:
        return None, [f"Estimate: not made ({why})"]
    result = estimate(job, shape, found)
    result.basis = basis(shape, source, job, found)
    machine_gib = plan.machine.memory_gib if plan.machine else None
    return result, describe(result, job, machine_gib, config.cost.gpu_hour_usd)


def basis(shape: ModelShape, source: str, job: Job, found) -> list[str]:
    """What the estimate rests on, one phrase each."""
    rates = ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in sorted(found.matmul_flops.items()))
    when = "cached" if found.cached else f"measured now in {found.measured_s:.1f} s"
    return [
        f"model {shape.params / 1e6:.0f}M parameters, {shape.layers} layers, hidden "
        f"{shape.hidden}, vocabulary {shape.vocab} (from {source})",
        f"{job.rollouts} rollouts x ~{job.prompt_tokens} prompt + up to {job.answer_tokens} "
        f"answer tokens, {job.max_turns} turn(s), async {job.async_level}",
        f"this machine: {rates} ({when}, fingerprint {found.fingerprint})",
    ]


def gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def describe(
    result: Forecast, job: Job, machine_gib: float | None, price: float | None
) -> list[str]:
    """The block's lines."""
    p = result.phases
    low, high = result.wall_range
    lines = [
        "Estimate (from the model's shape, the job and this machine's measured speed; "
        "corrected from measured steps once it runs):",
        f"  step: ~{result.step_s:.1f} s (generate {p['generate']:.1f}, orchestrator wait "
        f"{p['wait']:.1f}, train {p['train']:.1f}, publish {p['publish']:.1f})",
        f"  run: ~{duration(result.wall_s)} for {job.max_steps} steps ({duration(low)} to "
        f"{duration(high)}; start {duration(result.start_s)}, end {duration(result.end_s)})",
    ]
    memory = ", ".join(f"{name} {gib(v)}" for name, v in result.memory.items())
    have = f" of {machine_gib:.0f} GiB" if machine_gib else ""
    lines.append(f"  peak memory: {memory}; machine {gib(result.machine_memory)}{have}")
    if result.gpu_memory:
        per_gpu = ", ".join(f"{name} {gib(v)} per GPU" for name, v in result.gpu_memory.items())
        lines.append(f"  GPU memory: {per_gpu}")
    parts = ", ".join(f"{name} {gib(v)}" for name, v in result.disk.items() if v)
    lines.append(f"  disk at the end: {gib(result.disk_total)} ({parts})")
    if result.gpu_hours:
        cost = f", about ${result.gpu_hours * price:,.2f} at ${price}/GPU-hour" if price else ""
        lines.append(f"  GPU-hours: {result.gpu_hours:.2f}{cost}")
    lines += [f"  basis: {line}" for line in result.basis]
    return lines
