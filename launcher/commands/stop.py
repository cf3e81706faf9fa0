"""`rl stop [RUN]`: stop a running run cleanly (a SLURM job is cancelled).

Only a launcher proved to be the run's own (its recorded identity and the run's lock,
rlcore.processes.procs) is signalled, and only a SLURM job the scheduler says is the run's (the
comment `rl` submitted it with: the run's id and folder, launcher.slurm.prove_job) is cancelled; a
job id is passed where it cannot be an option. Anything else run.json names is left alone and
said: exit 0 when nothing of the run runs ("nothing to stop"), 1 when something holds the run
that cannot be proved to be its launcher or job, 2 for a folder that is not a run or a damaged
run.json."""

import signal

import psutil

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, check_process, given_or_latest
from launcher.slurm import ENDED_STATUSES
from rlcore.errors import ConfigError
from rlcore.processes import procs
from rlcore.processes.poll import wait_until
from rlcore.runs.ownership import RUN_MARKER, read_run_id
from rlcore.runs.run_json import read_state
from rlcore.runs.rundir import RunDir, record_state
from rlcore.runs.runguard import lock_holders

NAME = "stop"
HELP = "stop a running run cleanly"
STOP_WAIT_S = 120


def parser():
    parser = command_parser(
        NAME,
        HELP + " (SIGTERM to its launcher, or scancel its SLURM job, once proved the run's own).",
    )
    parser.add_argument("run", nargs="?", help=RUN_HELP + " (default: the latest active run)")
    return parser


def run(args) -> int:
    run_dir = given_or_latest(args.run)
    if read_run_id(run_dir.root) is None:
        found = ", ".join(sorted(p.name for p in run_dir.root.iterdir())) or "nothing"
        raise ConfigError(
            f"{run_dir.root} is not a run (no {RUN_MARKER} marker written by rl; found: "
            f"{found}): nothing signalled"
        )
    state = read_state(run_dir.root)
    if state.problem:
        raise ConfigError(f"{state.problem}: cannot tell which launcher runs it")
    if state.data.get("slurm_job_id"):
        return stop_job(run_dir, state.data)
    launcher = check_process(run_dir, state, procs.LAUNCHER)
    if not isinstance(launcher, psutil.Process):
        return nothing_to_stop(run_dir, launcher)
    try:
        launcher.send_signal(signal.SIGTERM)  # psutil refuses a pid reused since the proof
    except psutil.NoSuchProcess:
        pass  # it ended by itself meanwhile
    except psutil.AccessDenied:
        print(f"rl: error: launcher {launcher.pid} belongs to another user: not signalled")
        return 1
    try:
        wait_until(lambda: ended(launcher), STOP_WAIT_S, 0.2, f"launcher {launcher.pid} to stop")
    except TimeoutError:
        print(f"rl: error: launcher {launcher.pid} did not stop within {STOP_WAIT_S} s")
        return 1
    print(f"rl: stopped the run in {run_dir.root}")
    return 0


def ended(proc: psutil.Process) -> bool:
    """Gone, or exited and waiting for its parent to reap it (a zombie has stopped)."""
    return not procs.running(proc)


def nothing_to_stop(run_dir: RunDir, reason: str | None) -> int:
    """Say why no launcher was signalled: 0 when nothing holds the run, 1 (naming the
    holders) when something does that is not proved to be its launcher."""
    if reason is not None:
        print(f"rl: {reason}; nothing signalled")
    holders = lock_holders(run_dir.root)
    if holders:
        print(
            f"rl: error: {run_dir.root} is held by {'; '.join(holders)}, not proved to be "
            "this run's launcher: nothing signalled (if it is yours, end it yourself, e.g. "
            "`kill PID`)"
        )
        return 1
    print(f"rl: no running launcher for {run_dir.root}: nothing to stop")
    return 0


def stop_job(run_dir: RunDir, data: dict) -> int:
    """scancel the run's SLURM job (SIGTERM reaches the supervisor, which stops the rest) once
    the scheduler says it is this run's (launcher.slurm.prove_job: the comment rl submitted it
    with), and mark the run stopped in run.json once the job is known to be over, cancelled or
    another run's (then `rl delete` and a new start accept it). A job that cannot be proved
    either way is left alone and said (exit 1)."""
    from launcher.slurm import cancel, prove_job, query_job

    job_id = str(data["slurm_job_id"])  # a job id: rlcore.runs.run_json checked it
    job = query_job(job_id)
    if job is None:
        print(
            f"rl: error: cannot tell the state of SLURM job {job_id} of {run_dir.root} "
            "(squeue and scontrol do not know it or are not here): run rl stop on a SLURM "
            "login node"
        )
        return 1
    reason = prove_job(job, run_dir.root)
    if not job.active:
        print(f"rl: SLURM job {job_id} of {run_dir.root} is not running ({job.state or 'gone'})")
    elif reason is not None and not job.comment:
        print(f"rl: error: {reason}: nothing cancelled (if it is yours, `scancel {job_id}`)")
        return 1
    elif reason is not None:
        print(f"rl: {reason}; nothing cancelled, nothing of this run to stop")
    elif cancel(job_id):
        print(f"rl: cancelled SLURM job {job_id} of {run_dir.root}")
    else:
        print(f"rl: error: scancel {job_id} failed")
        return 1
    if data.get("status") not in ENDED_STATUSES:
        kept = {k: v for k, v in data.items() if k not in ("status", "updated")}
        record_state(run_dir, "stopped", **kept)
    return 0
