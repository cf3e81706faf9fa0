"""The estimate block `rl` prints before anything starts (and `--dry-run` shows): time per step
by phase and the whole run's wall time with a range, each process's peak memory against the
machine's, the disk at the end, GPU-hours and their price. The figures come from
rlcore/forecast (the model's shape, the job from the config, this machine's measured speed);
an estimate that cannot be made says why in one line and never stops the run."""

from dataclasses import replace

from rlcore.files.disk_full import free_bytes
from rlcore.forecast import answers, contention
from rlcore.forecast.model import (
    GIB,
    MODEL_INSPECTION_IMPORTS,
    PROMPT_TOKENS,
    Forecast,
    Job,
    estimate,
)
from rlcore.forecast.progress import duration
from rlcore.forecast.report import (
    attends_whole_rows,
    basis,
    block_tokens,
    checkpoint_counts,
    compile_cached,
    describe,
    environment_turns,
    lora_trainable,
    measured_speeds,
    sft_forecast,
    shared,
    side_files_bytes,
    vllm_inspects,
)
from rlcore.forecast.shape import ModelShape, shape_of
from rlcore.host.machine import DTYPE_BYTES

__all__ = ["forecast", "rl_job", "sft_forecast"]


def resident(parts: dict[str, float]) -> float:
    """The trainer's expected peak from the pre-flight estimate's terms: their resident share,
    without the background copies of a checkpoint or publish (written off the peak)."""
    from rlcore.forecast.model import TRAINER_RESIDENT

    return TRAINER_RESIDENT * sum(v for k, v in parts.items() if k != "background copies")


def answers_key(config) -> str:
    """The key of the run's answers (rlcore.forecast.answers): the model, the environments, the
    sampling and `seq_len`."""
    orch = config.orchestrator
    envs = [e.model_dump(mode="json", exclude={"name"}) for e in orch.env]
    sampling = orch.sampling.model_dump(mode="json")
    return answers.job_key(config.trainer.model.name, envs, sampling, orch.seq_len)


def measured_answers(config) -> answers.Measured | None:
    """What the finished runs of the same job measured of its prompts and answers (pooled),
    scaled to this run's steps (`answers.for_steps`), at most `answer_bound` tokens."""
    orch = config.orchestrator
    max_tokens = min(orch.sampling.max_tokens, orch.seq_len)
    found = answers.recall(answers_key(config), max_tokens, orch.seq_len)
    if found is None:
        return None
    bound = answer_bound(config, found.prompt_tokens)
    return answers.for_steps(found, config.trainer.max_steps, bound)


def answer_bound(config, prompt_tokens: float) -> int:
    """The most tokens an answer can take: `max_tokens`, and no more than a sample's room after
    its prompt (the orchestrator caps each request there: a 44-token prompt under `seq_len` 256
    leaves 212)."""
    orch = config.orchestrator
    return max(min(orch.sampling.max_tokens, orch.seq_len - round(prompt_tokens)), 1)


def rl_job(plan, shape: ModelShape) -> Job:
    """The `rl` run of `plan` as the estimate sees it: its prompts and answers as the last
    finished run of the same job measured them, else every turn taken and every answer at
    `max_tokens` (an upper bound)."""
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
    whole_rows = attends_whole_rows(
        trainer.model.attn_implementation,
        bool(gpus),
        trainer.data.share_prompts,
        trainer.model.compile is not False,
    )
    measured = measured_answers(config)
    return Job(
        max_steps=trainer.max_steps,
        rollouts=orch.batch_size,
        rollouts_per_example=orch.rollouts_per_example,
        prompt_tokens=round(measured.prompt_tokens) if measured else PROMPT_TOKENS,
        answer_tokens=answer_bound(config, measured.prompt_tokens if measured else PROMPT_TOKENS),
        turns=sum(t.share for t in measured.turns) if measured else turns,
        max_turns=turns,
        seq_len=orch.seq_len,
        async_level=trainer.async_level,
        train_dtype=trainer.model.dtype,
        decode_dtype=decode,
        served_bytes=DTYPE_BYTES.get(served, 4),
        served_dtype=served,
        trainable=lora_trainable(trainer.lora, shape),
        lora_targets=len(trainer.lora.target_modules) if trainer.lora else 0,
        micro_batch_tokens=trainer.tokens_per_pass(on_cpu=not gpus),
        compiled=trainer.model.compile is True,
        compile_cached=trainer.model.compile is True and compile_cached(),
        recompute=1 / trainer.model.activation_checkpointing_freq if ac else 0.0,
        row_attention=whole_rows,
        inspects_model=vllm_inspects(shape.architecture),
        max_concurrent=orch.client.max_concurrent,
        block_tokens=block_tokens(inference.vllm_args, bool(inference_gpus)),
        on_gpu=bool(gpus),
        trainer_gpus=len(gpus),
        inference_gpus=len(inference_gpus),
        gpu_memory_bytes=float(gpu_memory(gpus) or 0),
        kv_cache_bytes=kv,
        inference_replicas=inference.replicas,
        checkpoints_kept=kept,
        checkpoints_saved=saved,
        policy_folders=trainer.weight_transfer.num_policy_folders(trainer.async_level) - 1
        if trainer.weight_transfer.copies_in_background()
        else 0,
        archive=orch.samples.keep,
        archive_bound=orch.samples.bound_bytes(free_bytes(config.trainer.output_dir)),
        trainer_peak=resident(peak),
        tokenizer_bytes=side_files_bytes(config.trainer.model.name),
        answer_fill=1.0,
        answers=measured.turns if measured else (),
    )


def inspection_words(architecture: str, found) -> str:
    """The basis line for a start that includes vLLM's first inspection of the model's class."""
    extra = MODEL_INSPECTION_IMPORTS * found.import_s
    return (
        f"first run of {architecture} on this machine: vLLM inspects it once, in a process of "
        f"its own (~{duration(extra)} more at the start)"
    )


def forecast(plan, dry_run: bool = False) -> tuple[Forecast | None, list[str]]:
    """The estimate for `plan` and its block's lines; (None, [one line saying why]) when it
    cannot be made. Never raises, never writes (a new measurement of the machine is cached by
    launcher.preflight.run_checks once every check has passed)."""
    try:
        return _forecast(plan, dry_run)
    except Exception as err:  # noqa: BLE001  (an estimate never stops a run)
        return None, [f"Estimate: not made ({type(err).__name__}: {str(err)[:160]})"]


def _forecast(plan, dry_run: bool) -> tuple[Forecast | None, list[str]]:
    config = plan.config
    shape, source = shape_of(config.trainer.model.name)
    if shape is None:
        return None, [f"Estimate: not made ({source})"]
    job, measured = rl_job(plan, shape), measured_answers(config)
    dtypes = sorted({job.train_dtype, job.decode_dtype})
    if job.trainable is not None and not job.on_gpu:  # the adapter is served in this dtype
        dtypes = sorted({*dtypes, job.served_dtype})
    found, why = measured_speeds(plan.machine, dtypes, "cuda" if job.on_gpu else "cpu")
    if found is None:
        return None, [f"Estimate: not made ({why})"]
    slowdown, busy = shared(plan.machine)
    kind = contention.kind_of(False, job.async_level)
    size_key = contention.key(found.fingerprint, shape.params, kind)
    kept = None if job.on_gpu else contention.recall(size_key)
    if kept is not None and kind == "async":
        job = replace(job, contention=kept.factor)
    elif kept is not None:
        job = replace(job, pace=kept.factor)
    result = estimate(job, shape, found, slowdown)
    said = [answers.words(measured, job.answer_tokens, job.max_turns)]
    said += [] if job.on_gpu else [contention.words(kept, shape.params, kind)]
    said += [inspection_words(shape.architecture, found)] if job.inspects_model else []
    result.basis = [*basis(shape, source, job, found, dry_run), *said, *busy]
    result.contention_key = "" if job.on_gpu else size_key
    result.speeds, result.answers_key = found, answers_key(config)
    result.answers_bound, result.answers_seq_len = job.answer_tokens, job.seq_len
    machine_gib = plan.machine.memory_gib if plan.machine else None
    return result, describe(result, job, machine_gib, config.cost.gpu_hour_usd)
