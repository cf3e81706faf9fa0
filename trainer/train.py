"""The trainer loop.

Consumes: rollouts/step_<n> (n = step - 1), waiting up to data.wait_timeout_s for each.
Produces: weights/step_<n> + STABLE after every step (step_0 = the base model),
checkpoints/step_<n>/trainer/ + DONE every ckpt.interval steps and at the end,
metrics.jsonl records, configs/trainer.toml.
Unblocked by: the orchestrator writing the next batch (or data.fake, which needs nobody).
"""

import logging
import resource
import shutil
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from rlcore import faults
from rlcore.config.toml_io import write_config
from rlcore.config.weight_transfer import WeightSender
from rlcore.contracts.protocol import BatchTensors
from rlcore.errors import ConfigError
from rlcore.host.models import resolve_model
from rlcore.processes import heap
from rlcore.runs import waits
from rlcore.runs.rundir import RunDir, is_checkpoint_step
from rlcore.runs.runguard import TRAINER, open_run
from trainer.attention import shared_prompt_blocker
from trainer.ckpt import Checkpointer, load_checkpoint
from trainer.config import TrainerConfig
from trainer.data import fake_batch, split_for_ranks, wait_for_batch
from trainer.determinism import prepare_environment, setup_determinism
from trainer.dist import World, setup_world, teardown_world
from trainer.logprob_head import LogprobRequest, request_logprobs, uses_chunked_head
from trainer.loss import LossSums, TokenLoss, build_loss, loss_from_logprobs, token_logprobs
from trainer.metrics import MetricsLogger
from trainer.model import compute_context, load_model, source_dir
from trainer.model_type import TrainerModel
from trainer.optim import build_optimizer
from trainer.parity import parity_causes, parity_message
from trainer.speed import CompileClock, TrainerRun, compile_clock
from trainer.weights import build_sender, place_weights

logger = logging.getLogger("trainer")


@dataclass
class Trainer:
    """Everything the loop needs, built by `setup_trainer`."""

    config: TrainerConfig
    world: World
    run_dir: RunDir
    model: TrainerModel
    optimizer: torch.optim.Optimizer
    scheduler: Any
    token_loss: TokenLoss
    sender: WeightSender
    checkpointer: Checkpointer
    logger: MetricsLogger | None
    start_step: int = 0
    share_prompts: bool = False
    """Rows carry each prompt once for all its samples (data.share_prompts, when the model can)."""
    parity_causes: list[str] = field(default_factory=list)
    """What the trainer knows can make its logprobs differ from inference's (trainer/parity.py)."""
    parity_pending: bool = True
    """This attempt's parity check is still to be made (check_parity)."""
    compile_clock: CompileClock | None = None
    """Times a compiled run's first steps (trainer/speed.py)."""


def run(config: TrainerConfig) -> None:
    prepare_environment(config.deterministic)
    world = setup_world()
    if world.is_main:
        logger.info(f"world size {world.world_size} on {world.device.type}, {config.nodes} node(s)")
    try:
        trainer = setup_trainer(config, world)
        release_library_pages(world)
        try:
            for step in range(trainer.start_step + 1, config.max_steps + 1):
                train_and_publish(trainer, step)
                if step == trainer.start_step + 1:  # what the first step loaded and left
                    release_library_pages(world)
        except BaseException:
            close_quietly(trainer)  # the last finished step's policy still lands
            raise
        trainer.sender.close()
        trainer.checkpointer.close()
        if trainer.logger:
            trainer.logger.finish()
    finally:
        teardown_world(world)


def close_quietly(trainer: "Trainer") -> None:
    """Finish in-flight writes while an error propagates; their own errors are only logged."""
    for what, close in (
        ("policy folder", trainer.sender.close),
        ("checkpoint", trainer.checkpointer.close),
    ):
        try:
            close()
        except Exception as err:
            logger.warning(f"the last {what} could not be written: {err}")


def setup_run_dir(config: TrainerConfig, world: World) -> tuple[RunDir, int | None]:
    """The run directory and the step to resume from (None: fresh start); user errors raise
    ConfigError before anything is written."""
    run_dir = RunDir(config.output_dir)
    # A checkpoint may complete while ranks look: every rank takes rank 0's answer.
    step = run_dir.check_attempt(config.ckpt.resume_step, TRAINER)
    resume_step = world.broadcast_object(step)
    if world.is_main:
        open_run(run_dir.root, TRAINER)  # alone: never beside a running rl (rlcore.runs.runguard)
        waits.setup(run_dir.root, "trainer")  # what it waits for, for rl to read
        place_weights(run_dir, config.weight_transfer.weights_root())
        run_dir.drop_stale(resume_step or 0, produces=("weights",))
    world.barrier()
    return run_dir, resume_step


def setup_trainer(config: TrainerConfig, world: World) -> Trainer:
    started = time.perf_counter()
    quiet_libraries()
    setup_determinism(config.seed, config.deterministic)
    run_dir, resume_step = setup_run_dir(config, world)
    try:
        source = resolve_model(config.model.name)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if world.is_main:
        write_config(config, run_dir.config_file("trainer"))
    model = load_model(
        config.model,
        source,
        world,
        config.lora,
        trainer_run(config, world),
        config.optim.fused,
        masked_rows=config.data.share_prompts,
    )
    optimizer, scheduler = build_optimizer(model, config.optim, config.max_steps)
    sender = build_sender(
        config.weight_transfer,
        run_dir,
        model,
        world,
        source_dir(source),
        source,
        config.async_level,
        config.data.wait_timeout_s,
    )
    parts = ("trainer",) if config.data.fake is not None else ("trainer", "orchestrator")
    checkpointer = Checkpointer(run_dir, world, parts, config.ckpt.keep, config.ckpt.background)
    trainer = Trainer(
        config,
        world,
        run_dir,
        model,
        optimizer,
        scheduler,
        build_loss(config.loss),
        sender,
        checkpointer,
        logger=None,
    )
    trainer.parity_causes = parity_causes(model, source_dir(source))
    trainer.share_prompts = decide_share_prompts(config, model)
    saved: dict[str, Any] = {}
    if resume_step is not None:
        saved = load_checkpoint(run_dir, resume_step, model, optimizer, scheduler, world)
        trainer.start_step = resume_step
        logger.info(f"resumed from checkpoint step {resume_step}")
    trainer.compile_clock = compile_clock(model, world.device, trainer.start_step)
    if world.is_main:
        owns_wandb = config.data.fake is not None  # else the orchestrator relays our records
        trainer.logger = MetricsLogger(
            run_dir, config.wandb, config.model_dump(mode="json"), owns_wandb
        )
        trainer.logger.start_wandb(saved.get("wandb_run_id"))
    sender.publish_initial(trainer.start_step)
    logger.info(f"set up in {time.perf_counter() - started:.1f} s (model, optimizer, transport)")
    return trainer


def trainer_run(config: TrainerConfig, world: World) -> TrainerRun:
    """The run as the speed choices see it (trainer/speed.py): its steps, and tokens per step
    (a synthetic batch's; else one full pass per rank, as the orchestrator's batch size is not
    known here: `rl` decides with it)."""
    on_cpu = world.device.type == "cpu"
    per_pass = config.tokens_per_pass(on_cpu)
    fake = config.data.fake
    per_step = fake.batch_size * (fake.seq_len or config.seq_len) if fake else None
    return TrainerRun(
        max_steps=config.max_steps,
        tokens_per_step=per_step or per_pass * world.world_size,
        tokens_per_pass=per_pass,
        shards=world.world_size,
    )


def decide_share_prompts(config: TrainerConfig, model: TrainerModel) -> bool:
    if not config.data.share_prompts:
        return False
    blocker = shared_prompt_blocker(model, config.seq_len)
    if blocker is not None:
        logger.info(f"shared prompts: off ({blocker})")
        return False
    logger.info("shared prompts: on (the samples of one prompt share one pass over it)")
    return True


def quiet_libraries() -> None:
    """No per-save progress bars; no warning that one CPU process saves without a group."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")


def next_batch(trainer: Trainer, step: int) -> BatchTensors:
    """The batch that optimizer step `step` consumes (batch step - 1)."""
    config = trainer.config
    if config.data.fake is not None:
        vocab_size = trainer.model.config.get_text_config().vocab_size
        return fake_batch(config.data.fake, config.seq_len, vocab_size, step - 1, config.seed)
    folder = trainer.run_dir.rollout_dir(step - 1)
    with waits.waiting(f"batch {step - 1}", "orchestrator", str(folder)):
        return wait_for_batch(folder, config.data.wait_timeout_s)


def train_and_publish(trainer: Trainer, step: int) -> None:
    """One optimizer step on its batch, then publish weights, checkpoint and log."""
    config, world, run_dir = trainer.config, trainer.world, trainer.run_dir
    faults.hang_at_step(step, logger)
    wait_start = time.perf_counter()
    batch = next_batch(trainer, step)
    data_wait_s = time.perf_counter() - wait_start

    metrics = train_step(trainer, batch)
    if trainer.compile_clock is not None:
        metrics |= trainer.compile_clock.observe(step, metrics["step_time_s"])
    check_parity(trainer, step, batch.policy_step, metrics)

    # -- publish the new policy; forget what nobody can need
    publish_start = time.perf_counter()
    trainer.sender.publish(step)
    trainer.sender.prune(step)
    if world.is_main:
        shutil.rmtree(run_dir.rollout_dir(step - 1), ignore_errors=True)  # consumed
    metrics |= {"data_wait_s": data_wait_s, "publish_s": time.perf_counter() - publish_start}
    metrics |= trainer.sender.metrics()

    # -- checkpoint
    ckpt = config.ckpt
    if is_checkpoint_step(step, ckpt.interval, config.max_steps, ckpt.enabled):
        save_start = time.perf_counter()
        run = trainer.logger.wandb_run if trainer.logger is not None else None
        extra = {"wandb_run_id": run.id} if run is not None else {}
        metrics |= trainer.checkpointer.save(
            step,
            trainer.model,
            trainer.optimizer,
            trainer.scheduler,
            extra,
            last=step == config.max_steps,
        )
        metrics["ckpt_s"] = time.perf_counter() - save_start
    if trainer.logger:
        trainer.logger.log(step, metrics)


class TrainingError(RuntimeError):
    """The run cannot go on (a failed parity check, a non-finite update with on_nonfinite =
    "stop"); the message says why and what to check."""


def train_step(trainer: Trainer, batch: BatchTensors) -> dict[str, float]:
    """Forward/backward over this rank's micro-batches, clip, step; returns step metrics."""
    start = time.perf_counter()
    if trainer.world.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    lr = trainer.scheduler.get_last_lr()[0]
    try:
        total_loss, sums, times = forward_backward(trainer, batch)
        release_freed_memory(trainer.world)  # the passes' activations, before the optimizer
        optimizer_start = time.perf_counter()
        max_norm = trainer.config.optim.max_norm or float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), max_norm)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        applied = apply_update(trainer, total_loss, grad_norm)
        times["optimizer_s"] = time.perf_counter() - optimizer_start
    except (torch.OutOfMemoryError, torch.distributed.DistBackendError) as err:
        if not out_of_memory(err):
            raise
        raise TrainingError(out_of_memory_message(trainer, batch, err)) from None
    metrics = step_metrics(trainer, batch, total_loss, sums, grad_norm, lr, start)
    release_freed_memory(trainer.world)
    return metrics | times | {"skipped_update": float(not applied)}


def release_freed_memory(world: World) -> None:
    """On CPU, hand the heap's free pages back to the system after the passes and after each
    step: glibc keeps them otherwise, so the optimizer step would hold the passes' freed
    activations (quick start: 3.5 GiB resident in it, 2.96 when trimmed first), and
    micro-batches of changing shapes grow the trainer's resident memory step after step
    (measured 3.2 -> 5.9 GiB over 12 quick start steps)."""
    if world.device.type == "cpu":
        heap.trim()


def release_library_pages(world: World) -> None:
    """On CPU, hand back the shared-library pages that loading torch and the model left
    resident (the CUDA build's GPU libraries among them: rlcore/processes/heap.py), after setup and
    after the first step."""
    if world.device.type == "cpu":
        heap.page_out_libraries()


def out_of_memory(err: BaseException) -> bool:
    """torch's own out-of-memory error, or NCCL's when a collective cannot allocate its buffers
    (its message: 'Failed to CUDA calloc async 608 bytes')."""
    text = str(err)
    return (
        isinstance(err, torch.OutOfMemoryError)
        or "Failed to CUDA" in text
        or "out of memory" in text
    )


def out_of_memory_message(trainer: Trainer, batch: BatchTensors, err: BaseException) -> str:
    """What ran out, and the knobs that lower the trainer's peak memory."""
    config, world = trainer.config, trainer.world
    used = ""
    if world.device.type == "cuda":
        free, total = torch.cuda.mem_get_info()
        used = f" ({(total - free) / 2**30:.1f} of {total / 2**30:.1f} GiB in use)"
    model = config.model
    speed = getattr(trainer.model, "speed", None)
    on, every = (
        (speed.checkpointing, speed.checkpointing_freq)
        if speed
        else (model.activation_checkpointing, model.activation_checkpointing_freq)
    )
    return (
        f"{world.device} out of memory{used} at step {batch.step + 1} on a batch of "
        f"{batch.num_tokens} tokens: lower data.micro_batch_tokens "
        f"(now {config.tokens_per_pass(world.device.type == 'cpu')}) or seq_len (now "
        f"{config.seq_len}), set model.activation_checkpointing = true (now "
        f"{str(on).lower()}, every {every} layer(s)), keep model.logprob_chunk_tokens set "
        f"(now {model.logprob_chunk_tokens}), or "
        f"give the trainer more GPUs (--trainer-gpu-ids); `rl --dry-run` estimates the peak. "
        f"({memory_line(err)[:200]})"
    )


def memory_line(err: BaseException) -> str:
    """The line of the error that says what did not fit (NCCL says it last), else its first."""
    lines = str(err).splitlines() or [type(err).__name__]
    return next((line for line in lines if "Failed to CUDA" in line), lines[0])


def forward_backward(
    trainer: Trainer, batch: BatchTensors
) -> tuple[torch.Tensor, LossSums, dict[str, float]]:
    """Accumulate this rank's gradients of the batch loss; returns (loss, metric sums,
    seconds spent in forward passes and in backward passes)."""
    config, world, model = trainer.config, trainer.world, trainer.model
    max_tokens = config.tokens_per_pass(world.device.type == "cpu")
    micro_batches = split_for_ranks(
        batch, max_tokens, world.rank, world.world_size, trainer.share_prompts
    )
    num_loss_tokens = batch.total_loss_tokens  # written by the orchestrator, checked on load
    total_loss, sums = torch.zeros((), device=world.device), LossSums()
    times = {"forward_s": 0.0, "backward_s": 0.0}
    for i, mb in enumerate(micro_batches):
        start = time.perf_counter()
        mb = mb.to(world.device)
        if world.distributed:  # reduce gradients once, after the last micro-batch
            model.set_requires_gradient_sync(i == len(micro_batches) - 1)
        loss, mb_sums = micro_batch_loss(trainer, mb, batch.temperature, num_loss_tokens)
        backward_start = time.perf_counter()
        # FSDP averages gradients over ranks; the loss is a sum over the whole batch.
        (loss * world.world_size).backward()
        total_loss += loss.detach()
        sums.add(mb_sums)
        times["forward_s"] += backward_start - start
        times["backward_s"] += time.perf_counter() - backward_start
    return total_loss, sums, times


def micro_batch_loss(
    trainer: Trainer, mb, temperature: float, num_loss_tokens: int
) -> tuple[torch.Tensor, LossSums]:
    """This micro-batch's share of the batch loss, and its metric sums."""
    logprobs, entropy = forward_logprobs(trainer.model, trainer.world, mb, temperature)
    return loss_from_logprobs(logprobs, entropy, mb, trainer.token_loss, num_loss_tokens)


def forward_logprobs(
    model: TrainerModel, world: World, mb, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward one micro-batch: the logprob of each target token under logits / temperature and
    the entropy ([T] fp32 each; only loss positions are meaningful). The chunked head
    (trainer/logprob_head.py) answers them directly, else they come from full logits."""
    chunked = uses_chunked_head(model)
    if chunked:
        request_logprobs(model, LogprobRequest(mb.target_ids, mb.loss_mask, temperature))
    try:
        # No cache; without a mask (no shared prompts in the row) transformers reads sample
        # boundaries from the restarting position ids and masks attention block-diagonally.
        with compute_context(model, world):
            out = model(
                input_ids=mb.input_ids,
                position_ids=mb.position_ids,
                attention_mask=mb.attention_mask,  # set where samples share a prompt
                use_cache=False,
            )
    finally:
        if chunked:
            request_logprobs(model, None)
    if chunked:
        answer = out.logits[0].float()
        return answer[:, 0], answer[:, 1]
    return token_logprobs(out.logits[0], mb.target_ids, temperature)


def apply_update(trainer: Trainer, total_loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
    """Take the optimizer step unless the loss or gradient norm is NaN/inf on any rank (then
    skip it or stop, by `on_nonfinite`); the schedule advances either way. True if applied."""
    bad = (~torch.isfinite(total_loss)).float() + (~torch.isfinite(grad_norm.detach())).float()
    finite = float(trainer.world.all_reduce_sum(bad.reshape(1).to(total_loss.device))) == 0
    if finite:
        trainer.checkpointer.before_update()
        trainer.optimizer.step()
    else:
        message = (
            f"non-finite update (loss {float(total_loss):g}, grad norm {float(grad_norm):g}): "
            "lower optim.lr, set optim.max_norm, or check the batch's logprobs"
        )
        if trainer.config.on_nonfinite == "stop":
            raise TrainingError(message + " (on_nonfinite = stop)")
        logger.warning(f"skipped a {message}; the last good weights keep serving")
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.scheduler.step()
    return finite


def check_parity(
    trainer: Trainer, step: int, policy_step: int | None, metrics: dict[str, float]
) -> None:
    """On the first on-policy step of an attempt: trainer and inference must agree on the
    logprobs of the sampled tokens (mismatch_kl ~ 0), or every importance ratio is noise. A
    batch that an older policy generated (a resume with async_level >= 1 starts with one) also
    measures the policy's staleness, so it is not judged; the first batch generated by the
    weights the trainer holds is (its policy_step says which policy generated it)."""
    config = trainer.config
    if not trainer.parity_pending or not config.parity.enabled or config.data.fake:
        return
    held = step - 1  # the weights this step started from
    if policy_step is None and step != trainer.start_step + 1:
        trainer.parity_pending = False  # an older orchestrator: the first step only, as before
        return
    if policy_step is not None and policy_step != held:
        logger.info(
            f"parity check waits: batch {step - 1} comes from policy {policy_step}, the "
            f"trainer holds step {held} (async_level)"
        )
        return
    trainer.parity_pending = False
    limit = config.parity.max_mismatch_kl
    if limit is None:
        limit = 1e-3 if trainer.model.compute_dtype == torch.float32 else 1e-2
    kl = metrics["mismatch_kl"]
    if kl <= limit:
        logger.info(f"parity check passed: mismatch_kl {kl:.2e} <= {limit:g}")
        return
    raise TrainingError(parity_message(step, kl, limit, trainer.parity_causes))


def step_metrics(trainer, batch, total_loss, sums, grad_norm, lr, start) -> dict[str, float]:
    world = trainer.world
    stats = torch.tensor(
        [float(total_loss), sums.entropy, sums.mismatch_kl, sums.clipped, sums.masked, sums.tokens],
        dtype=torch.float64,
        device=world.device,
    )
    loss, entropy, kl, clipped, masked, tokens = world.all_reduce_sum(stats).tolist()
    tokens = max(tokens, 1)
    step_time_s = time.perf_counter() - start
    return {
        "loss": loss,
        "entropy": entropy / tokens,
        "mismatch_kl": kl / tokens,
        "clip_frac": clipped / tokens,
        "mask_frac": masked / tokens,
        "grad_norm": float(grad_norm),
        "lr": lr,
        "num_tokens": batch.num_tokens,
        "tokens_per_s": batch.num_tokens / step_time_s,
        "peak_memory_gib": peak_memory_gib(world),
        "step_time_s": step_time_s,
    }


def peak_memory_gib(world: World) -> float:
    """Peak accelerator memory this step, or the process's peak resident memory on CPU."""
    if world.device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
