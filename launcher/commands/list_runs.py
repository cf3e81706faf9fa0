"""`rl list [DIR]`: the runs under DIR (default outputs/) with status, step, checkpoint and
disk use."""

from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import disk_use_gib, find_runs, last_steps, launcher_running, read_state
from rlcore.config import RUNS_ROOT

NAME = "list"
HELP = "runs under DIR (default outputs/): status, step, checkpoint, disk use"


def parser():
    parser = command_parser(NAME, HELP + ".")
    parser.add_argument("dir", nargs="?", type=Path, default=RUNS_ROOT, help="where to look")
    return parser


def run(args) -> int:
    runs = find_runs(args.dir)
    if not runs:
        print(f"rl: no runs under {args.dir}")
        return 0
    rows = [("RUN", "STATUS", "STEP", "CHECKPOINT", "DISK")]
    for run_dir in runs:
        state = read_state(run_dir)
        status = "running" if launcher_running(state) else state.status.replace("running", "dead")
        step = last_steps(run_dir).get("trainer", "-")
        ckpt = run_dir.latest_checkpoint()
        rows.append((str(run_dir.root), status, str(step), "-" if ckpt is None else str(ckpt),
                     f"{disk_use_gib(run_dir.root):.2f} GiB"))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0
