"""`rl status [RUN]`: components, step, latest checkpoint and disk use of a run. A process is
reported running only when it is proved to be the run's own (rlcore.processes.procs); otherwise the
line says what was found at the recorded pid."""

import psutil

from launcher.commands.base import command_parser
from launcher.commands.runs import (
    RUN_HELP,
    check_process,
    given_or_latest,
    last_steps,
    pid_alive,
    run_processes,
)
from rlcore.files.disk_use import disk_use_gib
from rlcore.processes import procs
from rlcore.runs import waits
from rlcore.runs.run_json import read_state, recorded_pid

NAME = "status"
HELP = "components, step, latest checkpoint and disk use of a run"


def parser():
    parser = command_parser(NAME, HELP + ".")
    parser.add_argument("run", nargs="?", help=RUN_HELP + " (default: the latest active run)")
    return parser


def waiting(run_dir, name: str) -> str:
    """What a live component records it is waiting for (rlcore.runs.waits: each open wait), as
    text."""
    record = waits.read(run_dir.root, name)
    if not record or not pid_alive(record.get("pid")):
        return ""
    found = [f"{w['waiting_for']} from {waits.peer_words(w)}" for w in waits.open_waits(record)]
    return f", waiting for {'; '.join(found)}" if found else ""


def run(args) -> int:
    run_dir = given_or_latest(args.run)
    state = read_state(run_dir.root)
    launcher = check_process(run_dir, state, procs.LAUNCHER)
    alive = isinstance(launcher, psutil.Process)
    print(f"run:          {run_dir.root}")
    print(f"status:       {state.status}{' (launcher running)' if alive else ''}")
    if state.problem:
        print(f"              {state.problem}")
    if state.data.get("slurm_job_id"):
        print(f"slurm job:    {job_words(run_dir, str(state.data['slurm_job_id']))}")
    if launcher is not None:
        print(f"{'launcher:':<14}{described(launcher, recorded_pid(state, procs.LAUNCHER))}")
    if alive and state.data.get("inference_urls"):  # checked by rlcore.runs.run_json; never 8000
        print(f"{'serving at:':<14}{', '.join(state.data['inference_urls'])}")
    steps = last_steps(run_dir)
    for name in run_processes(run_dir, state):
        found = check_process(run_dir, state, name)
        up = "not running" if found is None else described(found, recorded_pid(state, name))
        step = f", last logged step {steps[name]}" if name in steps else ""
        print(f"{name + ':':<14}{up}{step}{waiting(run_dir, name)}")
    if (left := time_words(run_dir, state.data)) is not None:
        print(f"{'time:' if state.status == 'finished' else 'time left:':<14}{left}")
    complete = run_dir.complete_checkpoints()
    print(f"checkpoint:   {run_dir.latest_checkpoint()} (complete: {complete})")
    archive = disk_use_gib(run_dir.samples) * 1024
    print(
        f"disk use:     {disk_use_gib(run_dir.root):.2f} GiB (rollout archive samples/: "
        f"{archive:.1f} MiB)"
    )
    return 0


def time_words(run_dir, data: dict) -> str | None:
    """The time left and expected finish (estimate corrected by the measured steps), or for a
    finished run its estimate against the actual time (rlcore.forecast.progress)."""
    import time

    from rlcore.forecast.progress import status_line
    from rlcore.reporting.metrics import read_records

    records, _ = read_records(run_dir.metrics)
    return status_line(data, records, time.time())


def job_words(run_dir, job_id: str) -> str:
    """'N (STATE)' of the run's SLURM job, or why the job under that number is not proved to
    be the run's (launcher.slurm.prove_job)."""
    from launcher.slurm import prove_job, query_job

    job = query_job(job_id)
    if job is None:
        return f"{job_id} (state unknown)"
    reason = prove_job(job, run_dir.root) if job.active else None
    return f"{job_id} ({job.state or 'gone'}{'' if reason is None else f'; {reason}'})"


def described(found: psutil.Process | str, pid: int | None) -> str:
    """'running (pid N)' for a proved process, 'not running (pid N)' for a gone one, else
    'unverified: <why the live pid is not, or cannot be proved to be, the run's>'."""
    if isinstance(found, psutil.Process):
        return f"running (pid {found.pid})"
    if not pid_alive(pid):
        return f"not running (pid {pid})"
    return f"unverified: {found}"
