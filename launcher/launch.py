"""One attempt of a run: checks, resolved configs, start order, supervision, shutdown."""

import functools
import math
import signal
import sys

from launcher.exits import exit_message, oom_kills
from launcher.plan import Plan, as_given, describe, replica_config
from launcher.preflight import run_checks
from launcher.restarts import with_restarts
from launcher.rl_config import COMPONENTS
from launcher.supervisor import STALLED, Supervisor, tail
from rlcore.config.literal_secrets import externalize
from rlcore.config.toml_io import write_config
from rlcore.errors import USER_ERROR_EXIT_CODE, ConfigError
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE, stopped_text
from rlcore.processes import poll
from rlcore.processes.health import ForeignServer, new_nonce, port_holder
from rlcore.processes.poll import Stop, check_stop, ignore_stop_signals, install_stop_handlers
from rlcore.reporting.metrics import read_all_records, reward_curve
from rlcore.runs.attempt import new_attempt_id
from rlcore.secrets import redact_message


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
    a failure up to `max_restarts` times (launcher/restarts.py); returns the launcher's exit
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

    def drop_newer(step: int | None) -> None:
        plan.run.drop_stale(step or 0, produces=("rollouts", "weights"))

    attempt = functools.partial(run_attempt, plan)
    return with_restarts(attempt, step, plan.run, plan.config.max_restarts, "rl", drop_newer)


def run_attempt(plan: Plan, step: int | None) -> tuple[int, bool]:
    """One attempt resuming from `step`: (exit code, whether a signal stopped it)."""
    set_resume_step(plan, step)
    plan.attempt, plan.server_nonce = new_attempt_id(), new_nonce()
    write_configs(plan)
    note = f"resuming from step {step}" if step else "fresh start"
    print(f"rl: run directory {plan.run.root} ({note})\n{describe(plan)}", flush=True)
    supervisor = Supervisor(plan)
    try:
        return supervise(plan, supervisor), False
    except Stop as stop:
        ignore_stop_signals("rl")
        print(f"rl: got {signal.Signals(stop.signum).name}, stopping all components", flush=True)
        supervisor.stop_all(plan.config.shutdown_grace_s)
        supervisor.write_state("stopped", signal=stop.signum)
        return stop.exit_code, True


def supervise(plan: Plan, supervisor: Supervisor) -> int:
    oom_kills_before = oom_kills()
    # All at once: the trainer loads its model and the orchestrator its environments while
    # inference starts (the orchestrator waits for /health itself).
    for name in (*plan.inference_names, "orchestrator", "trainer"):
        check_stop()
        supervisor.start(name)  # run.json says "starting"
    print("rl: started inference, orchestrator and trainer; waiting for inference", flush=True)
    try:
        supervisor.wait_healthy(plan.config.inference.server.startup_timeout_s)
    except TimeoutError as err:
        return fail(supervisor, err.args[1], 1, err.args[0])
    except ForeignServer as err:
        return fail(supervisor, "inference", USER_ERROR_EXIT_CODE, str(err))
    if all(supervisor.children[n].proc.poll() is None for n in plan.inference_names):
        print("rl: inference is healthy", flush=True)
        supervisor.write_state("running")  # "running": inference serves
    name, code = poll.wait_until(supervisor.poll, math.inf, 0.5, "the run to end")
    if name == "done":
        ignore_stop_signals("rl")
        supervisor.stop_all(plan.config.shutdown_grace_s)
        supervisor.clock.finish(plan.run.root)  # measured totals beside the estimate
        supervisor.write_state("finished")
        print(f"rl: run finished: {supervisor.last_step_line}", flush=True)
        if (against := supervisor.clock.against_estimate()) is not None:
            print(f"rl: {against}", flush=True)
        records = read_all_records(plan.run.metrics, plan.run.root)
        for line in reward_curve(records).splitlines():
            print(f"rl: {line}", flush=True)
        print(f"rl: curves as a PNG: rl plot {plan.run.root}", flush=True)
        return 0
    if code == STALLED:
        return fail(supervisor, name, 1, supervisor.stall_message)
    message = exit_message(name, code, (oom_kills_before, oom_kills()))
    if code == DISK_FULL_EXIT_CODE:
        message = stopped_text(name, plan.run.root, plan.run.log_file(name))
    if name in plan.inference_names:
        message += port_taken(supervisor, name)
    return fail(supervisor, name, code, message)


def port_taken(supervisor: Supervisor, name: str) -> str:
    """For an inference server that ended: '; its port N is held by ...' when another process
    listens on the port it was to serve on (it died on bind), else ''."""
    port = replica_config(supervisor.plan.config, name).server.port
    holder = port_holder(port)
    return f"; its port {port} is held by {holder}" if holder else ""


def fail(supervisor: Supervisor, name: str, code: int, message: str) -> int:
    ignore_stop_signals("rl")
    supervisor.stop_all(supervisor.plan.config.shutdown_grace_s)
    log = supervisor.run.log_file(name)
    print(f"rl: error: {message}; stopped the other components.", file=sys.stderr)
    print(f"rl: last lines of {log}:\n{tail(log)}", file=sys.stderr, flush=True)
    supervisor.write_state("failed", failed_component=name, exit_code=code)  # a full disk: last
    return code if code > 0 else 1
