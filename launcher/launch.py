"""A run's launch: every check, then one attempt after another. Each attempt resolves its resume
step, gets new ids, writes the resolved configs and hands the supervisor what it starts, made
once from the plan (an AttemptSpec).

When a failed attempt is started again (`with_restarts`) is the one restart policy of `rl` and
`rl sft` (launcher/sft_run.py). An attempt that succeeded, stopped on a full disk (a restart
would fill it again) or was stopped by a signal is final. Any other failure restarts from the
run's latest complete checkpoint, up to `max_restarts` times, after a pause that grows with each
restart (BACKOFF_S per restart, at most MAX_BACKOFF_S: what failed, a GPU's memory still being
freed or a busy file system, gets time, and a Ctrl-C in it ends the run). Two failures with no
new checkpoint between them stop for good: the attempt would fail the same way again.
"""

import functools
import signal
import sys
from collections.abc import Callable

from launcher.plan import Plan, as_given, describe, replica_config, run_record
from launcher.preflight import run_checks
from launcher.rl_config import COMPONENTS
from launcher.supervisor import AttemptSpec, ProcessSpec, Supervisor
from rlcore.config.literal_secrets import externalize
from rlcore.config.toml_io import write_config
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE
from rlcore.processes import poll
from rlcore.processes.health import new_nonce
from rlcore.processes.poll import Stop, check_stop, install_stop_handlers
from rlcore.runs.attempt import new_attempt_id
from rlcore.runs.rundir import RunDir
from rlcore.secrets import redact_message

BACKOFF_S = 5.0
MAX_BACKOFF_S = 30.0

Attempt = Callable[[int | None], tuple[int, bool]]
"""One attempt resuming from a step (None: from the start): (exit code, whether a stop request
ended it)."""


def with_restarts(
    attempt: Attempt,
    step: int | None,
    run: RunDir,
    max_restarts: int,
    who: str,
) -> int:
    """Run `attempt` from `step`, then again after each failure as the policy above says; the
    last attempt's exit code, or the stop's when a signal ends a pause. `who` ("rl", "rl sft")
    starts each line printed."""
    failed_from: list[int | None] = []  # the resume step of each failed attempt
    while True:
        code, stopped = attempt(step)
        stopped = stopped or poll.stop_requested() is not None  # e.g. during a failure's stop
        if code in (0, DISK_FULL_EXIT_CODE) or stopped or len(failed_from) >= max_restarts:
            return code
        failed_from.append(step)
        step = run.latest_checkpoint()
        where = f"checkpoint step {step}" if step else "the start"
        if len(failed_from) > 1 and failed_from[-1] == step:
            at = f"step {step}" if step else "the start"
            print(f"{who}: error: failed twice at {at}; not restarting", file=sys.stderr)
            return code
        backoff_s = min(BACKOFF_S * len(failed_from), MAX_BACKOFF_S)
        print(
            f"{who}: restarting in {backoff_s:.0f} s from {where} "
            f"(restart {len(failed_from)} of {max_restarts})",
            flush=True,
        )
        install_stop_handlers()  # a stop requested since the failure, or now, ends the run
        try:
            poll.sleep(backoff_s)
        except Stop as stop:
            return stop.exit_code


def set_resume_step(plan: Plan, step: int | None) -> None:
    """Both sides get the same concrete step, resolved once by the launcher."""
    for ckpt in (plan.config.trainer.ckpt, plan.config.orchestrator.ckpt):
        ckpt.resume_step = step


def write_configs(plan: Plan) -> None:
    """The resolved configs, each literal secret replaced by a `$RL_SECRET_...` reference whose
    value the processes get in their environment only (rlcore.secrets)."""
    run = plan.run
    data, plan.secret_env = externalize(plan.config.model_dump(mode="json"), "")
    if not plan.placement:  # inside a job rl.toml stays as submitted (a restart reads it)
        write_config(externalize(as_given(plan), "")[0], run.config_file("rl"))
    for component in COMPONENTS:
        write_config(data[component], run.config_file(component))
    for name in plan.inference_names[1:]:
        replica, _ = externalize(
            replica_config(plan.config, name).model_dump(mode="json"), "inference"
        )
        write_config(replica, run.config_file(name))
    if plan.secret_env:
        names = ", ".join(sorted(plan.secret_env))
        print(
            f"rl: literal secrets in the config reach the processes in their environment "
            f"only ({names}); the configs in {run.configs} name these variables",
            flush=True,
        )


def launch(plan: Plan, clean: bool) -> int:
    """Run every check, then start and supervise, restarting from the latest checkpoint after
    a failure up to `max_restarts` times (`with_restarts`); returns the launcher's exit
    code. From here on a signal only requests the stop (rlcore.processes.poll), which every wait
    below looks for."""
    install_stop_handlers()
    try:
        step = run_checks(plan, clean)
        check_stop()
    except ConfigError as err:
        print(f"rl: error: {redact_message(str(err))}", file=sys.stderr)
        return USER_ERROR_EXIT_CODE
    except Stop as stop:
        print(f"rl: got {signal.Signals(stop.signum).name} before starting anything", flush=True)
        return stop.exit_code
    attempt = functools.partial(run_attempt, plan)
    return with_restarts(attempt, step, plan.run, plan.config.max_restarts, "rl")


def run_attempt(plan: Plan, step: int | None) -> tuple[int, bool]:
    """One attempt resuming from `step`: (exit code, whether a signal stopped it). The batches
    and policies newer than `step` go first: the attempt makes them again (a restart after a
    failure finds the failed attempt's there)."""
    plan.run.drop_stale(step or 0, produces=("rollouts", "weights"))
    set_resume_step(plan, step)
    plan.attempt, plan.server_nonce = new_attempt_id(), new_nonce()
    write_configs(plan)
    note = f"resuming from step {step}" if step else "fresh start"
    print(f"rl: run directory {plan.run.root} ({note})\n{describe(plan)}", flush=True)
    spec = attempt_spec(plan)  # what the supervisor starts: from here on it reads no plan
    supervisor = Supervisor(spec)
    return supervisor.supervise()


def attempt_spec(plan: Plan) -> AttemptSpec:
    """What the supervisor starts and watches in this attempt, made once from the plan (its
    configs written, its attempt id and server nonce new)."""
    config = plan.config
    return AttemptSpec(
        run=plan.run,
        attempt=plan.attempt,
        processes=[process_spec(plan, name) for name in plan.components],
        server_nonce=plan.server_nonce,
        max_steps=config.orchestrator.max_steps,
        startup_timeout_s=config.inference.server.startup_timeout_s,
        stall_timeout_s=config.stall_timeout_s,
        shutdown_grace_s=config.shutdown_grace_s,
        forecast=plan.forecast,
        record=run_record(plan),
    )


def process_spec(plan: Plan, name: str) -> ProcessSpec:
    """Process `name` of the plan: exactly `Plan.command(name)` with `Plan.env(name)`, its log,
    and an inference server's address."""
    server = name in plan.inference_names
    return ProcessSpec(
        name,
        plan.command(name),
        plan.env(name),
        plan.run.log_file(name),
        url=plan.url(name) if server else None,
        port=plan.port(name) if server else None,
        observable=not plan.wrappers.get(name),
    )
