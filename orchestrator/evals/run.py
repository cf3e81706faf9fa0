"""One evaluation: the model to evaluate (a folder or name, a run's step exported to a folder,
or what a running server serves), the server (its own or the given one), every [[eval.env]]'s
examples with seeded rollouts, then results.jsonl, summary.json and the table."""

import asyncio
import logging
import os
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path
from types import SimpleNamespace

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.estimate import evals_forecast
from orchestrator.evals.server import own_server
from orchestrator.evals.summary import env_summary, eval_labels, result_row, table, write_results
from orchestrator.seeds import eval_seeds
from rlcore.config.toml_io import write_config
from rlcore.errors import ConfigError
from rlcore.forecast.progress import duration
from rlcore.forecast.report import keep_measurement
from rlcore.host.machine import probe, serving_dtypes
from rlcore.processes import children
from rlcore.runs.run_json import changed_choices, recorded_choices
from rlcore.runs.runguard import EVALS, LAUNCHER_ENV, find_run, mark_own, open_run, replace_own

logger = logging.getLogger("orchestrator")


def run(config: EvalsConfig) -> dict[str, dict]:
    source = find_run(config.run, "--run") if config.run is not None else None
    out = config.output_dir
    run_id = open_run(out, EVALS)  # an eval run, or new or empty; checked before any write
    write_config(config, out / "eval.toml")
    model = config.model.name
    if source is not None:
        model = policy_folder(source, config.step, out, run_id)
        if not config.client.base_url:
            note_other_numerics(config, source)
    forecast, lines = evals_forecast(config, model)  # never raises nor writes
    print("\n".join(lines), flush=True)
    started = time.monotonic()
    with serving(config, model) as urls:
        keep_measurement(forecast)  # the server is ready: the evaluation starts
        rows = asyncio.run(evaluate(config, urls, model))
    summary = summarize(config, rows)
    write_results(out, rows, summary)
    took = time.monotonic() - started
    against = f" (estimated {duration(forecast.wall_s)})" if forecast is not None else ""
    print(f"evaluated {model} in {took:.0f} s{against} -> {out}")
    print(table(summary), flush=True)
    return summary


def note_other_numerics(config: EvalsConfig, source: Path) -> None:
    """Say so when this machine serves the policy of the run in `source` with other numerics
    (ISA, dtypes) than the run's own inference had: its scores may then differ in the last
    bits."""
    choices = recorded_choices(source)  # read back as untrusted data, bounded
    if not choices:
        return
    machine, model = probe(), config.inference.get("model", {})
    cpu = config.inference.get("cpu", {})
    served, matmul = serving_dtypes(
        model.get("dtype", "auto"), cpu.get("matmul_dtype", "auto"), machine.num_gpus > 0, machine
    )
    now = {
        "isa": machine.isa,
        "inference.model.dtype": served,
        "inference.cpu.matmul_dtype": matmul,
    }
    changed = changed_choices(choices, now)
    if changed:
        logger.warning(
            f"the run's inference computed otherwise than this evaluation's server "
            f"({'; '.join(changed)}): scores may differ from the run's in the last bits"
        )


def serving(config: EvalsConfig, model: str):
    """A context that yields the servers' base URLs: the given ones, or its own server's."""
    if config.client.base_url:
        return nullcontext(config.client.base_urls)
    own = own_server(
        model, config.inference, config.output_dir, config.seq_len, config.client.health_timeout_s
    )
    return wrap_list(own)


@contextmanager
def wrap_list(context):
    with context as url:
        yield [url]


def summarize(config: EvalsConfig, rows: list[dict]) -> dict[str, dict]:
    summary = {}
    for label, env_config in zip(env_labels(config), config.eval.env, strict=True):
        env_rows = [r for r in rows if r["env"] == label]
        summary[label] = env_summary(
            env_rows, env_config.rollouts_per_example, config.eval.pass_threshold
        )
    return summary


def env_labels(config: EvalsConfig) -> list[str]:
    return eval_labels([e.id for e in config.eval.env])


def policy_folder(source: Path, step: int, out: Path, run_id: str) -> str:
    """The policy of the run in `source` at `step` as a full HF folder in `out/policy` (`rl
    export`: its weights or checkpoint, a LoRA adapter merged), marked as this evaluation's
    own: only its own earlier export is ever replaced (rlcore.runs.runguard)."""
    folder = out / "policy"
    replace_own(folder, run_id)
    export_policy(source, step, folder)
    mark_own(folder, run_id, out)
    return str(folder)


def export_policy(source: Path, step: int, folder: Path) -> None:
    """`rl export RUN --step STEP --out FOLDER` (-1: the newest step) into this evaluation's
    folder, which this process holds (LAUNCHER_ENV: the export writes under its lock); a
    ConfigError with its message when it fails."""
    command = [sys.executable, "-m", "launcher.rl", "export", str(source), "--out", str(folder)]
    command += ["--step", str(step)] if step != -1 else []
    env = {**os.environ, LAUNCHER_ENV: str(os.getpid())}
    done = children.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise ConfigError(
            f"--run {source} --step {step}: "
            + done.stderr.strip().removeprefix("rl export: error: ")
        )
    logger.info(done.stdout.strip().splitlines()[0])


async def evaluate(config: EvalsConfig, base_urls: list[str], model: str) -> list[dict]:
    from orchestrator.envs import load_env, sampling_args
    from orchestrator.pooled_client import PooledClient
    from orchestrator.servers import ServerPool

    client_config = config.client
    pool = ServerPool(base_urls, client_config.timeout_s)
    try:
        await pool.wait_ready(
            model, client_config.health_timeout_s, client_config.api_key, config.seq_len
        )
        client = PooledClient(
            pool,
            model,
            config.seq_len,
            client_config.timeout_s,
            client_config.max_concurrent,
            client_config.api_key,
            client_config.api_key_var,
        )
        sampling = sampling_args(
            SimpleNamespace(
                **config.sampling.model_dump(), top_k=0, min_p=0.0, repetition_penalty=1.0
            )
        )
        rows = []
        labels = env_labels(config)
        for e, env_config in enumerate(config.eval.env):
            env = load_env(env_config)
            try:
                found = await env_rows(config, e, env, env_config, client, model, sampling)
                rows += [{**row, "env": labels[e]} for row in found]
            finally:
                await env.close()
        return rows
    finally:
        await pool.close()


async def env_rows(config, e, env, env_config, client, model, sampling) -> list[dict]:
    examples = env.eval_examples(env_config.num_examples)
    num = env_config.rollouts_per_example
    started = time.monotonic()
    groups = await asyncio.gather(
        *(
            env.run_group(
                example, num, client, model, sampling, eval_seeds(config.seed, 0, e, i, num)
            )
            for i, example in enumerate(examples)
        )
    )
    logger.info(
        f"{env_config.id}: {len(examples)} examples x {num} rollouts in "
        f"{time.monotonic() - started:.1f} s"
    )
    return [
        result_row(env_config.id, i, j, rollout)
        for i, group in enumerate(groups)
        for j, rollout in enumerate(group)
    ]
