"""`evals --watch RUN`: follow a run while it trains and evaluate each new policy.

Each round looks at the run for policies not evaluated yet (complete checkpoints and published
weights, as `rl export` finds them) and evaluates the newest one, saying which older ones it
skipped to keep up. The first policy starts the evaluation's own server; every later one is
exported into that server's own `weights/` folder and swapped in through its admin route, so
the server starts once. Each step's rows and summary go to `<output_dir>/step_<n>/`, and its
figures into the run's metrics.jsonl (component `evals`), which the run's orchestrator relays
to its W&B run; once the run has ended, the watcher continues that W&B run itself. The watch
ends when the run has ended (no process holds its folder) and every policy is evaluated; a
watch started again in the same output_dir skips the steps it already evaluated.
"""

import asyncio
import logging
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Literal

from orchestrator.evals.config import EvalsConfig
from orchestrator.evals.run import evaluate, export_policy, summarize
from orchestrator.evals.server import own_server
from orchestrator.evals.summary import read_summary, table, write_results
from rlcore.config.toml_io import write_config
from rlcore.errors import ConfigError
from rlcore.reporting.wandb_run import WandbRun, continue_wandb
from rlcore.runs.admin_token import read_token
from rlcore.runs.rundir import RunDir, step_name, steps_in
from rlcore.runs.runguard import EVALS, find_run, lock_holders, mark_own, open_run, replace_own

logger = logging.getLogger("orchestrator")
COMPONENT = "evals"


def watch(config: EvalsConfig) -> None:
    assert config.watch is not None, "evals' main watches only with --watch"
    run = RunDir(find_run(config.watch, "--watch"))
    out = config.output_dir
    run_id = open_run(out, EVALS)  # an eval run, or new or empty; checked before any write
    write_config(config, out / "eval.toml")
    done = evaluated_steps(out)
    server = Server(config, out, run_id)
    wandb = RunWandb(run)
    print(f"evals: watching {run.root} (evaluated already: {sorted(done) or 'none'})", flush=True)
    with ExitStack() as stack:
        while True:
            live = is_live(run)  # before looking: a run that ends now leaves its last step
            new = [s for s in policy_steps(run) if s > max(done, default=-1)]
            if not new:
                if not live:
                    break
                time.sleep(config.watch_interval_s)
                continue
            step = new[-1]
            if len(new) > 1:
                logger.info(f"evaluating step {step}; skipped steps {new[:-1]} to keep up")
            folder = out / "policy" if server.url is None else server.weights / step_name(step)
            replace_own(folder, run_id)  # this watch's own earlier export, never another's
            try:
                export_policy(run.root, step, folder)
            except ConfigError as err:  # pruned by the run meanwhile: the next one will do
                logger.warning(f"step {step} could not be exported ({err}); going on")
                done.add(step)
                continue
            mark_own(folder, run_id, out)
            url = server.serve(stack, folder, step)
            rows = asyncio.run(evaluate(config, [url], server.model))
            summary = summarize(config, rows)
            write_results(out / step_name(step), rows, summary)
            record(run, step, summary, wandb, is_live(run))  # ended meanwhile: W&B directly
            print(f"step {step} of {run.root}:\n{table(summary)}", flush=True)
            done.add(step)
    wandb.finish()
    print(f"evals: {run.root} has ended; evaluated steps {sorted(done)} -> {out}", flush=True)


class Server:
    """The watch's one inference server: started on the first policy, then swapped."""

    def __init__(self, config: EvalsConfig, out: Path, run_id: str):
        self.config, self.out, self.run_id = config, out, run_id
        self.url: str | None = None
        self.model = str(out / "policy")
        self.weights = RunDir(out / "server").weights
        self.current: Path | None = None

    def serve(self, stack: ExitStack, folder: Path, step: int) -> str:
        """Serve `folder` (step `step`): the server started on it, or swapped to it; its URL."""
        config = self.config
        if self.url is None:
            self.url = stack.enter_context(
                own_server(
                    self.model,
                    config.inference,
                    self.out,
                    config.seq_len,
                    config.client.health_timeout_s,
                )
            )
            return self.url
        asyncio.run(self.swap(self.url, folder))
        logger.info(f"the server now serves step {step}")
        if self.current is not None:
            replace_own(self.current, self.run_id)  # the export this watch made
        self.current = folder
        return self.url

    async def swap(self, url: str, folder: Path) -> None:
        from orchestrator.servers import ServerPool

        server_dir = RunDir(self.out / "server")
        pool = ServerPool([url], self.config.client.timeout_s, lambda: read_token(server_dir))
        try:
            await pool.update_weights([{"weight_dir": str(folder)}])
        finally:
            await pool.close()


def policy_steps(run: RunDir) -> list[int]:
    """Steps with a complete trainer checkpoint or published weights, ascending."""
    checkpoints = {s for s in run.complete_checkpoints() if run.part_done(s, "trainer")}
    weights = {s for s in steps_in(run.weights) if run.weights_stable(s)}
    return sorted(checkpoints | weights)


def evaluated_steps(out: Path) -> set[int]:
    """Steps whose evaluation is complete; a torn summary.json is named and its step redone."""
    done = set()
    for step in steps_in(out):
        path = out / step_name(step) / "summary.json"
        if read_summary(path) is not None:
            done.add(step)
        elif path.exists():
            logger.warning(
                f"{path} is torn (not a whole JSON object): evaluating step {step} again"
            )
    return done


def is_live(run: RunDir) -> bool:
    """Whether a launcher or a component started alone holds the run's folder."""
    return bool(lock_holders(run.root))


def flat(summary: dict[str, dict]) -> dict[str, float]:
    """`<env>/<figure>` for every environment's summary figure."""
    return {f"{env}/{key}": value for env, s in summary.items() for key, value in s.items()}


def record(run: RunDir, step: int, summary: dict, wandb: "RunWandb", live: bool) -> None:
    """One metrics.jsonl record of the step; into W&B directly once the run has ended (while
    it runs, its orchestrator relays the record)."""
    run.append_metrics(COMPONENT, step, flat(summary))
    if not live:
        wandb.log(step, flat(summary))


class RunWandb:
    """The run's W&B run, continued by id (rlcore.reporting.wandb_run.continue_wandb) on first use;
    none when the run never had one."""

    def __init__(self, run: RunDir):
        self.run_dir = run
        self.run: WandbRun | Literal[False] | None = None  # False: the run never had one

    def log(self, step: int, metrics: dict) -> None:
        if self.run is None:
            self.run = continue_wandb(self.run_dir) or False
        if self.run:
            self.run.log(COMPONENT, step, metrics)

    def finish(self) -> None:
        if self.run:
            self.run.finish()
