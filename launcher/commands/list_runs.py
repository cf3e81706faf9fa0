"""`rl list [DIR]`: the runs under DIR (default outputs/) with status, step, checkpoint and
disk use. A run is "running" only while its launcher is proved to be its own
(rlcore.processes.procs); a live pid run.json names that is not is said below the table."""

from pathlib import Path

import psutil

from launcher.commands.base import command_parser
from launcher.commands.runs import check_process, find_runs, last_steps, pid_alive
from launcher.slurm import ENDED_STATUSES
from rlcore.config.base import RUNS_ROOT
from rlcore.files.disk_use import disk_use_gib
from rlcore.processes import procs
from rlcore.runs.run_json import read_state, recorded_pid

NAME = "list"
HELP = "runs under DIR (default outputs/): status, step, checkpoint, disk use"


def parser():
    parser = command_parser(NAME, HELP + ".")
    parser.add_argument(
        "dir",
        nargs="?",
        type=folder_arg,
        default=RUNS_ROOT,
        help="where to look (default: outputs/)",
    )
    return parser


def folder_arg(value: str) -> Path:
    """DIR as given (the listing shows paths as the user wrote them), checked as every path is
    (rlcore.files.paths): an empty one (an unset `$DIR`) is refused, never taken for `.`."""
    from rlcore.files.paths import user_path

    user_path(value, "DIR")
    return Path(value).expanduser()


def run(args) -> int:
    runs = find_runs(args.dir)
    if not runs:
        print(f"rl: no runs under {args.dir}")
        return 0
    rows = [("RUN", "STATUS", "STEP", "CHECKPOINT", "DISK")]
    notes = []
    for run_dir in runs:
        state = read_state(run_dir.root)
        launcher = check_process(run_dir, state, procs.LAUNCHER)
        running = isinstance(launcher, psutil.Process)
        status = "running" if running else state.status.replace("running", "dead")
        claimed = state.status not in ENDED_STATUSES  # run.json says it may still run
        if claimed and isinstance(launcher, str) and pid_alive(recorded_pid(state, procs.LAUNCHER)):
            notes.append(f"rl: {run_dir.root}: {launcher}")
        step = last_steps(run_dir).get("trainer", "-")
        ckpt = run_dir.latest_checkpoint()
        rows.append(
            (
                str(run_dir.root),
                status,
                str(step),
                "-" if ckpt is None else str(ckpt),
                f"{disk_use_gib(run_dir.root):.2f} GiB",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    for note in notes:
        print(note)
    return 0
