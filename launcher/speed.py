"""The trainer's `auto` speed choices for a run (trainer/speed_policy.py), made once here so that
`rl` says them at start and in `--dry-run`, records them in run.json (`speed_choices`) and gives
the trainer concrete values: torch.compile, activation checkpointing (from the pre-flight
memory estimate, launcher/memory.py), AdamW's fused kernel, the loss head."""

from launcher.memory import estimate_parts, run_shape, trainer_memory
from launcher.plan import Plan
from rlcore.errors import ConfigError
from trainer.speed_policy import (
    RunShape,
    SpeedChoices,
    choose_checkpointing,
    choose_compile,
    choose_fused,
    compile_refusal,
)


def tokens_per_step(config) -> int:
    """The tokens a step trains on, as the compile choice weighs them: each rollout's answers as
    the job's finished runs measured them (launcher.forecast.measured_answers, scaled to this
    run's steps), else every answer at `max_tokens` (at most `seq_len`). A group's prompt goes
    once: not counted. (The 256-token job's answers averaged 60 tokens: at their bound, 212, a
    compile looked paid for by step 2 of 4; it took 19.6 s and was paid for by step 8.)"""
    from launcher.forecast import measured_answers

    orchestrator = config.orchestrator
    sample = float(min(orchestrator.sampling.max_tokens, orchestrator.seq_len))
    try:
        measured = measured_answers(config)
    except Exception:  # noqa: BLE001  (a damaged record only means the bound is weighed)
        measured = None
    if measured is not None and measured.turns:
        sample = sum(t.share * (t.mean + t.added) for t in measured.turns)
    return max(round(orchestrator.batch_size * sample), 1)


def derive_speed(plan: Plan) -> SpeedChoices:
    """Resolve `trainer.model.compile`, `trainer.model.activation_checkpointing` (and its
    freq) and `trainer.optim.fused` in `plan.config`; adds the one line saying them to the
    plan's notes. Needs the concrete compute dtype (launcher.plan.derive_dtypes)."""
    config, machine = plan.config, plan.machine
    assert machine is not None, "build_plan probes the machine"
    trainer, model = config.trainer, config.trainer.model
    gpus = plan.gpu_map.get("trainer") or []
    if model.compile is True and (refusal := compile_refusal(machine)):
        raise ConfigError(refusal)
    shape = run_shape(config)
    run = RunShape(trainer.max_steps, tokens_per_step(config), shape.params if shape else None)
    compile_on, compile_why = choose_compile(model.compile, bool(gpus), model.dtype, machine, run)
    peak, memory, layers = None, None, 1
    if shape is not None:
        memory, _ = trainer_memory(config, plan.gpu_map, shape)
        layers = shape.layers

        def peak(on: bool, every: int) -> float:
            return sum(estimate_parts(config, plan.gpu_map, shape, on, every).values())

    ac, freq, ac_why = choose_checkpointing(
        model.activation_checkpointing, model.activation_checkpointing_freq, layers, peak, memory
    )
    fused, fused_why = choose_fused(trainer.optim.fused, bool(gpus))
    model.compile, model.activation_checkpointing = compile_on, ac
    model.activation_checkpointing_freq, trainer.optim.fused = freq, fused
    choices = SpeedChoices(
        compile_on,
        compile_why,
        ac,
        freq,
        ac_why,
        fused,
        fused_why,
        model.logprob_chunk_tokens,
        model.dtype,
    )
    plan.dtypes.append(f"trainer speed: {choices.describe()}")
    plan.speed = choices
    return choices
