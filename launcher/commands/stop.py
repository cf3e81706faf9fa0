"""`rl stop [RUN]`: stop a running run cleanly (a SLURM job is cancelled)."""

import os
import signal
import time

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, find_run, latest_run, pid_alive, read_state
from launcher.slurm import ENDED_STATUSES
from rlcore.errors import ConfigError
from rlcore.rundir import RunDir, record_state

NAME = "stop"
HELP = "stop a running run cleanly"
STOP_WAIT_S = 120


def parser():
    parser = command_parser(NAME, HELP + " (SIGTERM to its launcher, or scancel its SLURM job).")
    parser.add_argument("run", nargs="?", help=RUN_HELP + " (default: the latest active run)")
    return parser


def run(args) -> int:
    run_dir = find_run(args.run) if args.run else latest_run()
    state = read_state(run_dir)
    if state.problem:
        raise ConfigError(f"{state.problem}: cannot tell which launcher runs it")
    if state.data.get("slurm_job_id"):
        return stop_job(run_dir, state.data)
    pid = state.data.get("launcher_pid")
    if not pid_alive(pid):
        print(f"rl: no running launcher for {run_dir.root}")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT_S
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    if pid_alive(pid):
        print(f"rl: error: launcher {pid} did not stop within {STOP_WAIT_S} s")
        return 1
    print(f"rl: stopped the run in {run_dir.root}")
    return 0


def stop_job(run_dir: RunDir, data: dict) -> int:
    """scancel the run's SLURM job (SIGTERM reaches the supervisor, which stops the rest), and
    mark the run stopped in run.json once the job is known to be over or cancelled (then
    `rl delete` and a new start accept it)."""
    from launcher.slurm import ACTIVE_STATES, cancel, job_over, job_state

    job_id = str(data["slurm_job_id"])
    state = job_state(job_id) or ("gone" if job_over(job_id) else None)
    if state is None:
        print(f"rl: error: cannot tell the state of SLURM job {job_id} of {run_dir.root} "
              "(squeue and scontrol do not know it or are not here): run rl stop on a SLURM "
              "login node")  # fmt: skip
        return 1
    if state not in ACTIVE_STATES:
        print(f"rl: SLURM job {job_id} of {run_dir.root} is not running ({state})")
    elif cancel(job_id):
        print(f"rl: cancelled SLURM job {job_id} of {run_dir.root}")
    else:
        print(f"rl: error: scancel {job_id} failed")
        return 1
    if data.get("status") not in ENDED_STATUSES:
        kept = {k: v for k, v in data.items() if k not in ("status", "updated")}
        record_state(run_dir, "stopped", **kept)
    return 0
