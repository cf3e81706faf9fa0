"""`rl status [RUN]`: components, step, latest checkpoint and disk use of a run."""

from launcher.commands.base import command_parser
from launcher.commands.runs import (
    RUN_HELP,
    disk_use_gib,
    find_run,
    last_steps,
    latest_run,
    pid_alive,
    read_state,
)
from rlcore import waits
from rlcore.rundir import COMPONENTS

NAME = "status"
HELP = "components, step, latest checkpoint and disk use of a run"


def parser():
    parser = command_parser(NAME, HELP + ".")
    parser.add_argument("run", nargs="?", help=RUN_HELP + " (default: the latest active run)")
    return parser


def waiting(run_dir, name: str) -> str:
    """What a live component records it is waiting for (rlcore.waits), as text."""
    record = waits.read(run_dir.root, name)
    if not record or not record.get("waiting_for") or not pid_alive(record.get("pid")):
        return ""
    return f", waiting for {record['waiting_for']} from the {record['peer']}"


def run(args) -> int:
    run_dir = find_run(args.run) if args.run else latest_run()
    state = read_state(run_dir)
    alive = pid_alive(state.data.get("launcher_pid"))
    print(f"run:          {run_dir.root}")
    print(f"status:       {state.status}{' (launcher running)' if alive else ''}")
    if state.problem:
        print(f"              {state.problem}")
    if state.data.get("slurm_job_id"):
        from launcher.slurm import job_state

        job = state.data["slurm_job_id"]
        print(f"slurm job:    {job} ({job_state(job) or 'state unknown'})")
    steps = last_steps(run_dir)
    pids = state.data.get("pids", {}) if isinstance(state.data.get("pids"), dict) else {}
    for name in [*COMPONENTS, *sorted(n for n in pids if n.startswith("inference-"))]:
        pid = pids.get(name)
        up = "running" if pid_alive(pid) else "not running"
        step = f", last logged step {steps[name]}" if name in steps else ""
        print(f"{name + ':':<14}{up}{f' (pid {pid})' if pid else ''}{step}{waiting(run_dir, name)}")
    complete = run_dir.complete_checkpoints()
    print(f"checkpoint:   {run_dir.latest_checkpoint()} (complete: {complete})")
    print(f"disk use:     {disk_use_gib(run_dir.root):.2f} GiB")
    return 0
