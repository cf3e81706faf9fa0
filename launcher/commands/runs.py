"""Run folders as the subcommands see them: resolving a RUN argument (a run's name under
outputs/, or the path of a run), the processes `run.json` records (rlcore.runs.run_json's status
record) proved before anything acts on them (rlcore.processes.procs), and progress."""

from pathlib import Path

import psutil

from rlcore.config.base import RUNS_ROOT
from rlcore.errors import ConfigError
from rlcore.processes import procs
from rlcore.processes.procs import pid_alive
from rlcore.reporting.metrics import read_last_records
from rlcore.runs import runguard
from rlcore.runs.ownership import RUN_MARKER, read_run_id
from rlcore.runs.run_json import RunState, identities, recorded_pid
from rlcore.runs.rundir import COMPONENTS, RunDir
from rlcore.runs.runguard import looks_like_run

RUN_HELP = "a run's name under outputs/, or the path of a run folder"


def find_run(name: str) -> RunDir:
    """The run `name` means (rlcore.runs.runguard.find_run: a name under outputs/, or a path),
    its folder absolute and resolved; taken only if it is a run. An empty name (an unset
    `$RUN`) is refused, never taken for the latest run."""
    return RunDir(runguard.find_run(name))


def given_or_latest(name: str | None) -> RunDir:
    """The run a command's optional RUN names; the latest active one only when RUN was not
    given at all (`rl stop ''` is refused as an empty RUN)."""
    return latest_run() if name is None else find_run(name)


def latest_run() -> RunDir:
    """The run under outputs/ that was active last (for commands given no RUN)."""
    runs = find_runs(RUNS_ROOT)
    if not runs:
        raise ConfigError(f"no runs under {RUNS_ROOT}/: name one (a run folder's path)")
    return max(runs, key=lambda run: activity_time(run.root))


def activity_time(root: Path) -> float:
    times = [p.stat().st_mtime for p in (root / "run.json", root / "metrics.jsonl") if p.exists()]
    return max(times, default=root.stat().st_mtime)


def find_runs(root: Path, depth: int = 3) -> list[RunDir]:
    """Run folders at or below `root` (not inside another run); links are not followed."""
    if looks_like_run(root):
        return [RunDir(root)]
    if depth == 0 or not root.is_dir() or root.is_symlink():
        return []
    found = []
    children = (p for p in root.iterdir() if p.is_dir() and not p.is_symlink())
    for child in sorted(c for c in children if not c.name.startswith(".")):
        found += find_runs(child, depth - 1)
    return found


def check_process(run: RunDir, state: RunState, name: str) -> psutil.Process | str | None:
    """The live process run.json records as the run's `name` (procs.LAUNCHER or a component),
    proved by its identity (rlcore.processes.procs.verify; the launcher also by the run's lock);
    else why not, naming the pid; None when run.json records no pid for it. A folder without the run
    marker has no launcher, and a pid recorded without an identity (an older rl) is never
    proved."""
    pid = recorded_pid(state, name)
    if pid is None:
        return None
    what = f"this run's {name}"
    if name == procs.LAUNCHER and not is_marked(run):
        return f"pid {pid} is not {what}: {run.root} has no {RUN_MARKER} marker (not a run)"
    record = identities(state).get(name)
    if not procs.is_record(record):
        if not pid_alive(pid):
            return f"pid {pid} is not running"
        return (
            f"pid {pid} is alive, but run.json records no identity for it (an older rl wrote "
            f"it), so it cannot be proved to be {what}"
        )
    return procs.verify(
        record, what, lock=run.root / RUN_MARKER if name == procs.LAUNCHER else None
    )


SFT_PROCESS = "sft"
"""An `rl sft` run's one process besides its launcher; it logs its records as the trainer."""


def run_processes(run: RunDir, state: RunState) -> list[str]:
    """The processes of the run in `run`, in order: an `rl sft` run's `sft`, an rl run's
    components; then any other process run.json records."""
    names = [SFT_PROCESS] if runguard.run_kind(run.root) == "sft" else list(COMPONENTS)
    pids = state.data.get("pids")
    others = sorted(n for n in pids if n not in names) if isinstance(pids, dict) else []
    return [*names, *others]


def last_steps(run: RunDir) -> dict[str, int]:
    """Each component's last logged step, from the tail of metrics.jsonl (rlcore.reporting.metrics:
    bounded, never the whole of a huge file)."""
    records = read_last_records(run.metrics, run.root)
    steps = {record["component"]: record["step"] for record in records}
    if "trainer" in steps and runguard.run_kind(run.root) == "sft":
        steps[SFT_PROCESS] = steps.pop("trainer")
    return steps


def is_marked(run: RunDir) -> bool:
    return read_run_id(run.root) is not None
