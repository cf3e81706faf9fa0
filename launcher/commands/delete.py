"""`rl delete RUN [--yes]`: delete a run: only what rl created in a folder it marked as a run
(rlcore.ownership), never a running run, never anything else."""

import sys
from pathlib import Path

from launcher.commands.base import command_parser
from launcher.commands.runs import (
    RUN_HELP,
    disk_use_gib,
    find_run,
    is_plain_name,
    launcher_running,
    read_state,
)
from rlcore.errors import ConfigError
from rlcore.ownership import RUN_ENTRIES, remove_run_files, verified_run
from rlcore.rundir import RunDir

NAME = "delete"
HELP = "delete a run folder (asks first; refuses a running run)"
EPILOG = f"""\
What is removed: in a folder rl marked as a run (its .rl-run file), the entries a run creates
({", ".join(RUN_ENTRIES)}) and the marker, links without what they point to (except the run's
own rl-weights-<id> folder from weight_transfer.dir, which carries the run's id); anything else
in the folder is kept and named. Never a folder without the marker, the current folder or one
above it, home, / or a git work tree."""


def parser():
    parser = command_parser(NAME, HELP + ".", EPILOG)
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask")
    return parser


def run(args) -> int:
    path = Path(args.run)
    run_dir = RunDir(path) if not is_plain_name(args.run) and path.exists() else find_run(args.run)
    verified_run(run_dir.root, "RUN")
    state = read_state(run_dir)
    if launcher_running(state):
        raise ConfigError(f"{run_dir.root} is running: `rl stop {run_dir.root}` first")
    if state.problem:
        print(f"rl: warning: {state.problem}; cannot tell whether it still runs", file=sys.stderr)
    size = disk_use_gib(run_dir.root)
    if not args.yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"deleting {run_dir.root} needs --yes (no terminal to ask)")
        answer = input(f"delete the run {run_dir.root} ({size:.2f} GiB)? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("rl: nothing deleted")
            return 0
    removal = remove_run_files(run_dir.root, keep_marker=False)
    print(f"rl: deleted {run_dir.root} ({size:.2f} GiB)")
    if removal.kept:
        print(f"rl: kept {', '.join(removal.kept)} in {run_dir.root} (not created by rl)")
    return 0
