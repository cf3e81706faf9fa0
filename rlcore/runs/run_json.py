"""`run.json` read back as a typed record: the launcher writes it (rlcore.runs.rundir.record_state),
and every command that reads it takes it as untrusted data (rlcore.files.readback). The fields
anything acts on are checked here once: a pid is a positive integer a process can have, a SLURM job
id is a job id (digits, or the array form `JOB_TASK`), never an option or a list; `pids` maps names
to pids; `identities` maps names to objects. A field of the wrong kind makes the whole file
`Damaged` ("damaged run folder: run.json: WHY"), so nothing acts on half of it.

What `rl status`, `rl stop`, `rl delete`, `rl view` and the SLURM job check read of it is a
`RunState` (`read_state`): the object as written, or why it could not be read, never a
traceback; and the pid it records for a process (`recorded_pid`) with that process's identity
(`identities`), for rlcore.processes.procs to prove before anything acts on it."""

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlcore.files.readback import RUN_JSON, Damaged, read_object
from rlcore.processes import procs
from rlcore.processes.procs import MAX_PID, is_pid  # noqa: F401  (run.json's pid rule)

JOB_ID = re.compile(r"[0-9]{1,12}(?:_[0-9]{1,9})?")
"""A SLURM job id: digits, or an array task `JOB_TASK`."""
MAX_STATUS_CHARS = 40
SERVER_URL = re.compile(
    r"https?://[A-Za-z0-9.\-]{1,253}:[0-9]{1,5}|https?://\[[0-9A-Fa-f:.]{2,45}\]:[0-9]{1,5}"
)
"""An inference server's address as the launcher records it: scheme, host (an IPv6 literal in
brackets) and port, nothing else."""
CHOICE = re.compile(r"[A-Za-z0-9_.+-]{0,40}")
"""A numeric choice's name or value as run.json records it (`isa`, `trainer.model.dtype`,
`bfloat16`, `avx512_bf16`); anything else is not compared, so never printed."""


def is_job_id(value: object) -> bool:
    return (
        isinstance(value, str | int)
        and not isinstance(value, bool)
        and bool(JOB_ID.fullmatch(str(value)))
    )


@dataclass
class RunJson:
    """The checked fields of run.json, and the whole object as read (`data`)."""

    data: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    launcher_pid: int | None = None
    pids: dict[str, int] = field(default_factory=dict)
    identities: dict[str, dict] = field(default_factory=dict)
    slurm_job_id: str | None = None
    inference_urls: list[str] = field(default_factory=list)
    """Where the run's inference servers listen (their ports chosen at start: never assume
    8000)."""


def parse(data: dict[str, Any], where: Path | str = "run.json") -> RunJson:
    """`data` (a JSON object read back) as a RunJson; Damaged naming the first bad field."""
    status = data.get("status")
    if status is not None and (
        not isinstance(status, str) or len(status) > MAX_STATUS_CHARS or not status.isprintable()
    ):
        raise Damaged(where, "status is not a short word")
    launcher_pid = data.get("launcher_pid")
    if launcher_pid is not None and not is_pid(launcher_pid):
        raise Damaged(where, f"launcher_pid is not a pid (a positive integer up to {MAX_PID})")
    pids = data.get("pids", {})
    if not isinstance(pids, dict) or not all(is_pid(p) for p in pids.values()):
        raise Damaged(where, "pids is not an object of names and pids")
    identities = data.get("identities", {})
    if not isinstance(identities, dict) or not all(
        isinstance(record, dict) for record in identities.values()
    ):
        raise Damaged(where, "identities is not an object of names and process records")
    job = data.get("slurm_job_id")
    if job is not None and not is_job_id(job):
        raise Damaged(where, "slurm_job_id is not a SLURM job id (digits, or JOB_TASK)")
    urls = data.get("inference_urls", [])
    if not isinstance(urls, list) or not all(
        isinstance(url, str) and SERVER_URL.fullmatch(url) for url in urls
    ):
        raise Damaged(where, "inference_urls is not a list of server addresses (http://HOST:PORT)")
    return RunJson(
        data,
        status,
        launcher_pid,
        dict(pids),
        dict(identities),
        None if job is None else str(job),
        list(urls),
    )


def read(path: Path, root: Path | None = None) -> RunJson | None:
    """run.json at `path` read back and checked; None when there is none, Damaged when it
    cannot be read or is not what rl writes."""
    try:
        data = read_object(path, RUN_JSON, root)
    except FileNotFoundError:
        return None
    return parse(data, path)


@dataclass
class RunState:
    """`run.json` as written by the launcher; `problem` says why it could not be read."""

    data: dict
    problem: str | None = None

    @property
    def status(self) -> str:
        if self.problem:
            return "unreadable"
        return str(self.data.get("status", "unknown"))


def read_state(root: Path) -> RunState:
    """The run.json of the run in `root` read back through the bounded reader and checked
    (`read`); a damaged one is `problem` ("damaged run folder: run.json: WHY"), never a
    traceback."""
    try:
        record = read(root / "run.json", root)
    except Damaged as err:
        return RunState({}, str(err))
    return RunState({} if record is None else record.data)


def recorded_pid(state: RunState, name: str) -> int | None:
    """The pid run.json records for `name` (procs.LAUNCHER or a component); None if none."""
    record = identities(state).get(name)
    if procs.is_record(record):
        return record["pid"]
    if name == procs.LAUNCHER:
        pid = state.data.get("launcher_pid")
    else:
        pids = state.data.get("pids")
        pid = pids.get(name) if isinstance(pids, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 else None


def identities(state: RunState) -> dict:
    """The identity records run.json keeps by process name (rlcore.processes.procs)."""
    found = state.data.get(procs.IDENTITIES)
    return found if isinstance(found, dict) else {}


def recorded_choices(root: Path) -> dict[str, str]:
    """The numeric choices (ISA, dtypes: launcher.plan.numeric_choices) that the run in `root`
    recorded in its run.json; {} when there is none, it is damaged, or an older run recorded
    none. Names and values that are not short plain words are left out."""
    choices = read_state(root).data.get("numeric_choices")
    if not isinstance(choices, dict):
        return {}
    return {
        k: v
        for k, v in choices.items()
        if isinstance(k, str) and isinstance(v, str) and CHOICE.fullmatch(k) and CHOICE.fullmatch(v)
    }


def changed_choices(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """`key: recorded -> now` for each numeric choice that differs from what a run recorded;
    keys the record lacks (an older run) are not compared."""
    return [
        f"{key} {recorded[key]} -> {value}"
        for key, value in now.items()
        if key in recorded and recorded[key] != value
    ]
