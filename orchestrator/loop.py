"""The orchestrator loop: environments -> rollouts on the current policy -> training batches.

For step n = 0 .. max_steps-1:
  waits for   a policy no older than n - async_level (`weights/step_<m>/STABLE`, m >= n -
              async_level; the newest one ready; exactly n - async_level when `deterministic`),
              and has every inference server serve it if it changed (orchestrator/policy.py);
  consumes    examples from the environments, mixed by weight in a seeded, resumable order;
  produces    `rollouts/step_<n>` (rlcore.contracts.protocol batch + samples.jsonl),
              `samples/step_<n>.parquet` (every rollout, orchestrator/archive.py), one metrics line,
              every `ckpt.interval` steps its part of `checkpoints/step_<n+1>` (deterministic:
              of step_<n+1-async_level>, carrying the batches since; orchestrator/ckpt.py), evals
              (`evals/step_<n>/{results.jsonl,summary.json}`, as the `evals` command writes);
  unblocked by the trainer publishing weights. Generating batch n+1 while the trainer trains on
  batch n needs no threads: the loop only waits for step n - async_level.
"""

import asyncio
import logging
import os
import time
from dataclasses import dataclass

from orchestrator import ckpt
from orchestrator.advantage import compute_advantages
from orchestrator.archive import Archive
from orchestrator.client import OrchestratorError
from orchestrator.config import OrchestratorConfig
from orchestrator.dynamic import SampledGroups, sample_batch
from orchestrator.envs import EnvAdapter, Rollout, load_env, sampling_args
from orchestrator.evals.summary import env_summary, eval_labels, result_row, write_results
from orchestrator.monitor import SAMPLES_FILE, Monitor, samples_jsonl
from orchestrator.policy import Policy
from orchestrator.pooled_client import PooledClient
from orchestrator.rollouts import Stats, assign_groups, batch_digests, rollout_samples
from orchestrator.sampler import ExampleSampler
from orchestrator.seeds import eval_seeds, rollout_seeds
from orchestrator.servers import ServerPool
from orchestrator.weights import build_receiver
from rlcore.config.toml_io import write_config
from rlcore.contracts.protocol import Batch, write_batch
from rlcore.errors import ConfigError
from rlcore.host.environments import check_envs
from rlcore.processes import heap
from rlcore.processes.health import SERVER_NONCE_ENV
from rlcore.reporting.metrics import step_line
from rlcore.runs import waits
from rlcore.runs.admin_token import read_token
from rlcore.runs.rundir import RunDir, step_name
from rlcore.runs.runguard import ORCHESTRATOR

logger = logging.getLogger("orchestrator")
PASS_THRESHOLD = 1.0
"""An in-run eval rollout passes (pass@k) when its reward is at least this (`evals`' default)."""


def run(config: OrchestratorConfig) -> None:
    asyncio.run(run_async(config))


async def run_async(config: OrchestratorConfig) -> None:
    orchestrator = await Orchestrator.setup(config)
    try:
        await orchestrator.run()
    finally:
        await orchestrator.close()


@dataclass
class Orchestrator:
    """One orchestrator run and everything it holds, built once by `setup`."""

    config: OrchestratorConfig
    run_dir: RunDir
    envs: list[EnvAdapter]
    eval_envs: list[EnvAdapter]
    state: ckpt.OrchestratorState
    """What checkpoints carry: batches written, sampler position, counters."""
    sampler: ExampleSampler
    plan: ckpt.CheckpointPlan
    """When each checkpoint's orchestrator part is written (and which batches it carries)."""
    client: PooledClient
    """The chat client the environments sample through; its pool holds the inference servers
    and the one HTTP client."""
    monitor: Monitor
    policy: Policy
    """The policy inference serves (the weight-transfer seam)."""
    archive: Archive
    """The rollout archive (`samples/`), written in its own thread."""
    resume_step: int | None = None
    """The checkpoint this attempt resumed from (None: a fresh start)."""

    @property
    def servers(self) -> ServerPool:
        return self.client.pool

    @classmethod
    async def setup(cls, config: OrchestratorConfig) -> "Orchestrator":
        """Check and load everything, wait for inference; a resume continues the checkpoint."""
        run_dir = RunDir(config.output_dir)
        check_envs(config.env, "env")
        if config.eval is not None:
            check_envs(config.eval.env, "eval.env")
        resume_step = setup_resume(config, run_dir)
        waits.setup(run_dir.root, "orchestrator")  # what it waits for, for rl to read
        write_config(config, run_dir.config_file("orchestrator"))
        envs = [load_env(e) for e in config.env]
        eval_envs = [load_env(e) for e in config.eval.env] if config.eval else []
        state = setup_state(config, run_dir, resume_step)
        plan = ckpt.CheckpointPlan(
            config.ckpt.interval,
            config.max_steps,
            config.ckpt.enabled,
            lead=config.async_level if config.deterministic else 0,
        )
        if resume_step is not None and (restored := ckpt.restore_batches(run_dir, resume_step)):
            logger.info(f"batches {restored} restored from the checkpoint (generated before it)")
        sampler = ExampleSampler(
            [env.num_examples for env in envs],
            [e.weight for e in config.env],
            config.seed,
            state.sampler,
        )
        client = await setup_client(config, run_dir)
        monitor = Monitor(config, run_dir, state.wandb_run_id)
        state.wandb_run_id = monitor.wandb_run_id
        receiver = build_receiver(config.weight_transfer, run_dir, trusted_upto=resume_step or 0)
        # A fresh run starts on the base model, which inference serves from the start.
        policy = Policy(config, receiver, client.pool, 0 if resume_step is None else None)
        archive = Archive(config.samples, run_dir.samples, config.model.name)
        archive.drop_from(state.step)  # this attempt writes them again
        return cls(
            config,
            run_dir,
            envs,
            eval_envs,
            state,
            sampler,
            plan,
            client,
            monitor,
            policy,
            archive,
            resume_step,
        )

    async def run(self) -> None:
        """Every batch still to come, with evals and checkpoints as configured."""
        config, state, eval_config = self.config, self.state, self.config.eval
        if eval_config and eval_config.eval_base_model and self.resume_step is None:
            await self.evaluate(0)
        first = state.step
        while state.step < config.max_steps:
            await self.train_step()
            if (
                state.step == first + 1
            ):  # imports and the first batch done (rlcore/processes/heap.py)
                heap.trim()
                heap.page_out_libraries()
            if eval_config and state.step % eval_config.interval == 0:
                await self.evaluate(state.step)
            for step in self.plan.due(state.step):
                self.archive.flush()  # on disk up to the checkpoint
                ckpt.save(self.run_dir, state, step)
        if eval_config and config.max_steps % eval_config.interval:
            await self.evaluate(config.max_steps)

    async def close(self) -> None:
        """The end, also on an error: a trainer waiting to be asked for a policy goes on."""
        self.policy.close()
        try:
            self.archive.close()  # the last step's file (a full disk raises here)
        finally:
            finished = self.state.step >= self.config.max_steps
            max_steps = self.config.max_steps if finished else None
            self.monitor.close(max_steps, self.config.weights_timeout_s)
            await asyncio.gather(*(env.close() for env in [*self.envs, *self.eval_envs]))
            await self.client.close()

    async def train_step(self) -> None:
        """Generate, score and write batch `state.step`, then log it."""
        config, state, run_dir = self.config, self.state, self.run_dir
        step, start = state.step, time.monotonic()
        wait_s = await self.policy.ensure(step)
        generate_start = time.monotonic()
        model = self.policy.served_model
        sampled = await sample_batch(
            config.batch_size // config.rollouts_per_example,
            lambda num_groups: self.sample_groups(model, num_groups, step),
            config.dynamic_sampling,
        )
        generate_s = time.monotonic() - generate_start
        batch, stats = build_batch(config, step, sampled.kept)
        policy_step = batch.policy_step = self.policy.step  # every sample comes from it
        assert policy_step is not None, "Policy.ensure loaded a policy"
        rollouts = [r for group in sampled.groups for r in group]
        check_errors(step, rollouts, batch)
        samples = samples_jsonl(rollouts, config.num_saved_samples)
        # kept for the checkpoint before the trainer can consume (and delete) it
        ckpt.keep_batch(run_dir, self.plan, batch, {SAMPLES_FILE: samples})
        write_batch(batch, run_dir.rollout_dir(step), extra_files={SAMPLES_FILE: samples})
        env_ids = [config.env[env].id for env, _ in sampled.picks]
        self.archive.submit(step, policy_step, env_ids, sampled.groups)
        state.step = step + 1
        state.num_rollouts += len(rollouts)
        state.num_samples += len(batch.samples)
        state.num_tokens += batch.num_tokens
        step_s = time.monotonic() - start
        metrics = self.step_metrics(sampled, batch, stats) | sampled.metrics()
        metrics |= {"policy_step": self.policy.step, "time/step_s": step_s}
        metrics |= {"time/wait_weights_s": wait_s, "time/generate_s": generate_s}
        metrics["progress/num_tokens"] = state.num_tokens
        self.log_step(step, step_s, batch, metrics)

    def step_metrics(self, sampled: SampledGroups, batch: Batch, stats: Stats) -> dict:
        """The batch's rewards, sizes and failures, as its metrics.jsonl record holds them."""
        config, picks, groups = self.config, sampled.picks, sampled.groups
        rollouts = [r for group in groups for r in group]
        # Errored rollouts have no real reward: they are counted in num_errors instead.
        rewards = [r.reward for r in rollouts if r.error is None] or [0.0]
        metrics: dict = {"reward": sum(rewards) / len(rewards)}
        for name in sorted({k for r in rollouts for k in r.metrics}):
            values = [r.metrics[name] for r in rollouts if name in r.metrics]
            metrics[f"metrics/{name}"] = sum(values) / len(values)
        for env_index, env_config in enumerate(config.env):
            env_rewards = [
                r.reward
                for (e, _), group in zip(picks, groups, strict=True)
                if e == env_index
                for r in group
            ]
            if env_rewards and len(self.envs) > 1:
                label = env_config.name or env_config.id
                metrics[f"reward/{label}"] = sum(env_rewards) / len(env_rewards)
        num_samples = max(1, len(batch.samples))
        completion_lens = [len(s.completion_ids) for s in batch.samples]
        num_mixed = sum(len({r.reward for r in g}) > 1 for g in groups)
        metrics |= {
            "num_samples": len(batch.samples),
            "num_tokens": batch.num_tokens,
            "seq_len": batch.num_tokens / num_samples,
            "completion_len": sum(completion_lens) / num_samples,
            "truncated_fraction": stats.num_truncated / num_samples,
            "num_split_rollouts": stats.num_split,
            "num_dropped_rollouts": stats.num_dropped,
            "num_errors": sum(r.error is not None for r in rollouts),
            **first_error(rollouts),
            "mixed_reward_groups": num_mixed / len(groups),
        }
        if config.deterministic:
            metrics |= batch_digests(batch.samples)
        return metrics

    def log_step(self, step: int, step_s: float, batch: Batch, metrics: dict) -> None:
        metrics["throughput_tokens_per_s"] = batch.num_tokens / step_s
        metrics["num_capped_requests"] = self.client.budget.take_num_capped()
        metrics.update(self.servers.take_counts())
        logger.info(
            step_line(
                step,
                step_s,
                metrics["reward"],
                batch.num_tokens,
                len(batch.samples),
                metrics["num_errors"],
            )
        )
        self.monitor.log(step, metrics)

    async def sample_groups(
        self, model: str, num_groups: int, step: int = 0
    ) -> tuple[list[tuple[int, int]], list[list[Rollout]]]:
        """Draw `num_groups` examples and generate and score a group for each."""
        config = self.config
        first_draw = self.sampler.state.num_drawn
        picks = self.sampler.take(num_groups)
        seeds = None
        if config.deterministic:  # a pure function of (seed, step, draw, rollout)
            seeds = [
                rollout_seeds(config.seed, step, first_draw + i, config.rollouts_per_example)
                for i in range(num_groups)
            ]
        groups = await self.generate(picks, model, seeds)
        mark_empty(groups)
        if config.zero_truncated_rewards:
            zero_truncated(groups)
        return picks, groups

    async def generate(
        self, picks: list[tuple[int, int]], model: str, seeds: list[list[int]] | None = None
    ) -> list[list[Rollout]]:
        """One group of `rollouts_per_example` rollouts per picked example, all concurrently
        (the client keeps `client.max_concurrent` requests in flight), from served model
        `model`; `seeds`: each group's per-rollout sampling seeds (deterministic runs)."""
        sampling = sampling_args(self.config.sampling)
        groups = [
            self.envs[env].run_group(
                self.envs[env].example(index),
                self.config.rollouts_per_example,
                self.client,
                model,
                sampling,
                seeds[i] if seeds else None,
            )
            for i, (env, index) in enumerate(picks)
        ]
        return list(await asyncio.gather(*groups))

    async def evaluate(self, step: int) -> None:
        """Evaluate exactly the policy after `step` steps (waiting for the trainer to publish
        it), so that eval metrics logged at `step` belong to that policy; logs mean rewards and
        writes every rollout to `evals/step_<step>/` as the `evals` command does."""
        config = self.config
        assert config.eval is not None
        await self.policy.ensure_exactly(step)
        sampling = sampling_args(config.sampling)
        model = self.policy.served_model
        metrics: dict = {"eval/policy_step": self.policy.step}
        rows, summary = [], {}
        labels = eval_labels([e.id for e in config.eval.env])
        for e, (env, env_config) in enumerate(zip(self.eval_envs, config.eval.env, strict=True)):
            start = time.monotonic()
            examples = env.eval_examples(env_config.num_examples)
            num = env_config.rollouts_per_example
            seeds = [
                eval_seeds(config.seed, step, e, i, num) if config.deterministic else None
                for i in range(len(examples))
            ]
            groups = await asyncio.gather(
                *(
                    env.run_group(example, num, self.client, model, sampling, example_seeds)
                    for example, example_seeds in zip(examples, seeds, strict=True)
                )
            )
            env_rows = [
                result_row(labels[e], i, j, rollout)
                for i, group in enumerate(groups)
                for j, rollout in enumerate(group)
            ]
            rows += env_rows
            summary[labels[e]] = env_summary(env_rows, num, PASS_THRESHOLD)
            rewards = [r.reward for group in groups for r in group]
            reward = sum(rewards) / max(1, len(rewards))
            metrics[f"eval/{env.id}/reward"] = reward
            metrics[f"eval/{env.id}/num_rollouts"] = len(rewards)
            logger.info(
                f"Eval {env.id} at step {step} | Reward: {reward:.4f} | "
                f"Rollouts: {len(rewards)} | Time: {time.monotonic() - start:.2f}s"
            )
        write_results(self.run_dir.evals / step_name(step), rows, summary)
        self.monitor.log(step, metrics)


async def setup_client(config: OrchestratorConfig, run_dir: RunDir) -> PooledClient:
    """The chat client over every inference server, once they all answer /health and serve
    `model.name` with room for `seq_len` (rl sees the wait)."""
    client_config = config.client
    pool = ServerPool(client_config.base_urls, client_config.timeout_s, lambda: read_token(run_dir))
    try:
        with waits.waiting("inference to answer /health", "inference"):
            await pool.wait_ready(
                config.model.name,
                client_config.health_timeout_s,
                client_config.api_key,
                config.seq_len,
                os.environ.get(SERVER_NONCE_ENV),
            )
    except BaseException:
        await pool.close()
        raise
    if len(pool) > 1:
        logger.info(f"spreading requests over {len(pool)} inference servers")
    return PooledClient(
        pool,
        config.model.name,
        config.seq_len,
        client_config.timeout_s,
        client_config.max_concurrent,
        client_config.api_key,
        client_config.api_key_var,
    )


def setup_resume(config: OrchestratorConfig, run_dir: RunDir) -> int | None:
    """The concrete step to resume from (None: fresh start); drops the batches that step will
    regenerate (and, on a fresh start, every batch of an earlier attempt)."""
    step = run_dir.prepare_attempt(config.ckpt.resume_step, ("rollouts",), ORCHESTRATOR)
    if step is None:
        if config.ckpt.resume_step == -1:
            logger.info(f"no complete checkpoint in {run_dir.checkpoints}: starting fresh")
        return None
    if not run_dir.part_dir(step, ckpt.PART).is_dir():
        raise ConfigError(f"checkpoint {run_dir.checkpoint_dir(step)} has no orchestrator part")
    logger.info(f"resuming from {run_dir.checkpoint_dir(step)}")
    return step


def setup_state(
    config: OrchestratorConfig, run_dir: RunDir, resume_step: int | None
) -> ckpt.OrchestratorState:
    """A fresh state, or the checkpoint's (which must be for the same environments)."""
    env_ids = [e.id for e in config.env]
    if resume_step is None:
        return ckpt.OrchestratorState(env_ids=env_ids)
    state = ckpt.load(run_dir, resume_step)
    if state.env_ids != env_ids:
        raise ConfigError(
            f"checkpoint {run_dir.checkpoint_dir(resume_step)} was written for environments "
            f"{state.env_ids}, but the config has {env_ids}: resume with the same [[env]] list"
        )
    return state


def build_batch(
    config: OrchestratorConfig, step: int, groups: list[list[Rollout]]
) -> tuple[Batch, Stats]:
    """Samples with group-relative advantages; rollouts without tokens or with an error are left
    out of their group (counted in num_dropped_rollouts)."""
    batch, stats = Batch(step=step, temperature=config.sampling.temperature), Stats()
    num_groups = 0
    for group in groups:
        # A rollout that ended in an environment or server error is not trained on (reward 0
        # would teach the policy something about the error) nor part of its group's baseline.
        usable = [r for r in group if r.turns and r.error is None]
        stats.num_dropped += len(group) - len(usable)
        advantages = compute_advantages([r.reward for r in usable], config.advantage)
        samples = []
        for rollout, advantage in zip(usable, advantages, strict=True):
            built = rollout_samples(
                rollout, advantage, config.seq_len, config.mask_truncated_completions, stats
            )
            rollout.advantage = advantage if built else None  # for the archive
            samples += built
        num_groups = assign_groups(samples, num_groups)  # the trainer packs prompts by these
        batch.samples += samples
    return batch, stats


EMPTY_ROLLOUT = (
    "produced no tokens: the environment ended it before any model turn (is the prompt longer "
    "than seq_len, or than the inference server's max_model_len?)"
)


def mark_empty(groups: list[list[Rollout]]) -> None:
    """A rollout without a single model turn is a failure with a reason, never a silent drop."""
    for rollout in (r for group in groups for r in group):
        if not rollout.turns and rollout.error is None:
            rollout.error = EMPTY_ROLLOUT


def zero_truncated(groups: list[list[Rollout]]) -> None:
    """An answer cut off by the token budget scores 0."""
    for rollout in (r for group in groups for r in group):
        if rollout.is_truncated or any(turn.is_truncated for turn in rollout.turns):
            rollout.reward = 0.0


def check_errors(step: int, rollouts: list[Rollout], batch: Batch) -> None:
    """Warn about failed rollouts; a batch with no sample at all ends the run."""
    errors = [r.error for r in rollouts if r.error is not None]
    if errors:
        logger.warning(f"step {step}: {len(errors)}/{len(rollouts)} rollouts failed: {errors[0]}")
    if not batch.samples:
        raise OrchestratorError(
            f"step {step}: no rollout produced tokens to train on"
            + (f"; first error: {errors[0]}" if errors else "")
        )


def first_error(rollouts: list[Rollout]) -> dict[str, str]:
    """The first failed rollout's reason, kept in metrics.jsonl next to the count."""
    errors = [r.error for r in rollouts if r.error is not None]
    return {"first_error": errors[0][:500]} if errors else {}
