"""`rl delete RUN [--yes]`: delete a run: only what rl created in a folder it marked as a run
(rlcore.runs.ownership), never a running run, never anything else."""

import sys
from pathlib import Path

import psutil

from launcher.commands.base import command_parser
from launcher.commands.runs import RUN_HELP, check_process, find_run
from launcher.prompt import ask
from launcher.slurm import check_no_job
from rlcore.errors import ConfigError
from rlcore.files.disk_use import disk_use_gib
from rlcore.files.paths import user_path
from rlcore.processes import procs
from rlcore.runs.ownership import RUN_ENTRIES, RUN_MARKER, remove_run_files, verified_run
from rlcore.runs.run_json import RunState, read_state, recorded_pid
from rlcore.runs.rundir import RunDir
from rlcore.runs.runguard import is_plain_name, locked, looks_like_run, run_candidates

NAME = "delete"
HELP = "delete a run folder (asks first; refuses a running run)"
EPILOG = f"""\
What is removed: in a folder rl marked as a run (its .rl-run file), the entries a run creates
({", ".join(RUN_ENTRIES)}), the temporary files rl writes beside them (.<entry>.tmp<pid>, by
exact name) and the marker; links without what they point to (except the run's own
rl-weights-<id> folder from weight_transfer.dir, outside the run, whose marker names this run's
id and folder: a link to the run itself, into it or above it is only unlinked). Anything else
in the folder is kept and named. Never a folder without the marker, the current folder or one
above it, home, / or a git work tree; RUN is resolved first (`x/..`, `~`, links in it), and a
RUN that is itself a link is refused.

Refused (exit 2, nothing deleted) while anyone holds the run: an rl running it, a trainer or
orchestrator started alone in it (its shared lock), or a SLURM job it was submitted to that has
not finished (`rl stop RUN` marks it stopped; a job squeue no longer lists is over, and so is a
job the scheduler says is another run's). A launcher pid in run.json that is not proved to be
the run's (the pid now names another process) is said, and the run deleted if nothing holds
it: `rl stop` then finds nothing to stop either."""


def parser():
    parser = command_parser(NAME, HELP + ".", EPILOG)
    parser.add_argument("run", help=RUN_HELP)
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask")
    return parser


def run(args) -> int:
    run_dir = target(args.run)
    verified_run(run_dir.root, "RUN")
    state = read_state(run_dir.root)
    note = check_not_running(run_dir, state)
    check_no_job(run_dir, "RUN")
    if state.problem:
        print(f"rl: warning: {state.problem}; cannot tell whether it still runs", file=sys.stderr)
    root = run_dir.root
    with locked(root, "RUN"):  # nobody else in it, shared holders included
        if note:
            print(f"rl: {note}")
        size = disk_use_gib(root)
        if not args.yes and not confirmed(root, size):
            print("rl: nothing deleted")
            return 0
        removal = remove_run_files(root, keep_marker=False)
    if not root.exists():
        print(f"rl: deleted {root} ({size:.2f} GiB)")
        return 0
    freed = size - disk_use_gib(root)
    print(
        f"rl: deleted from {root} what the run made ({', '.join(removal.removed) or 'nothing'}; "
        f"{freed:.2f} GiB); the folder stays"
    )
    for line in removal.kept_lines(root, f"rl delete {root}"):
        print(f"rl: {line}")
    return 0


def check_not_running(run_dir: RunDir, state: RunState) -> str | None:
    """Refuse a run whose launcher is proved to run it (`rl stop` would stop it). A live pid
    run.json records that is not proved to be its launcher (reused by a stranger, or recorded
    by an older rl without an identity) is no reason to refuse: the exclusive lock taken next
    refuses the deletion if anything holds the run, exactly when `rl stop` does not say
    "nothing to stop"; the note returned says it once the lock is taken. On a filesystem
    without locks nothing can tell: refused."""
    launcher = check_process(run_dir, state, procs.LAUNCHER)
    root = run_dir.root
    if isinstance(launcher, psutil.Process):
        raise ConfigError(
            f"{root} is running (launcher pid {launcher.pid}): `rl stop {root}` first"
        )
    if launcher is None or not procs.pid_alive(recorded_pid(state, procs.LAUNCHER)):
        return None
    if procs.lock_mode(root / RUN_MARKER) == "unsupported":
        raise ConfigError(
            f"{root} may be running: {launcher}, and its filesystem has no locks to tell; "
            f"nothing deleted. If no rl runs it, remove what you want of it yourself"
        )
    return f"{launcher}; nothing holds the run, so its launcher is not running"


def target(name: str) -> RunDir:
    """The folder RUN means, absolute and resolved (rlcore.files.paths); a link to a run is refused,
    never followed, and a path that is not a run is named with what it holds."""
    for given in run_candidates(name):
        if given.is_symlink():
            raise ConfigError(
                f"RUN {str(given)!r} is a symbolic link: give the run folder it points to "
                f"({given.resolve()}) if you mean to delete that run"
            )
        if looks_like_run(given):
            break
    path = user_path(name, "RUN")
    return RunDir(path) if not is_plain_name(name) and path.exists() else find_run(name)


def confirmed(root: Path, size: float) -> bool:
    answer = ask(f"delete the run {root} ({size:.2f} GiB)? [y/N] ", f"deleting {root} needs --yes")
    return answer.strip().lower() in ("y", "yes")
