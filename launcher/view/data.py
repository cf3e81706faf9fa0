"""One run as `rl view` reads it, lazily and read-only: its status (run.json through
rlcore.runs.run_json; the launcher is proved by its recorded identity, rlcore.processes.procs, but
its lock is never probed: a viewer must not take a run's lock even for an instant, when a starting
`rl` could find it held), summary, curves (launcher.view.curves), configs (redacted again,
rlcore.secrets), checkpoints, log tails (redacted as commands' output is, `redact_text`) and what a
live component waits for. Every file is reached through launcher.view.safe and read through
rlcore.files.readback, once per change of the file (`FileCache`); what cannot be read is `Damaged`
and shown as such, and a run none of whose summary can be read is listed as damaged, never breaking
the list."""

import os
import re
import threading
import time
import tomllib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil

from launcher.view import safe
from launcher.view.curves import Curves, ends, file_key, last_mean, refresh
from rlcore.files import readback
from rlcore.files.disk_use import disk_use_gib
from rlcore.files.readback import MIB, Bound, Damaged, shown
from rlcore.processes import procs
from rlcore.runs import run_json, waits
from rlcore.runs.run_json import RunState, identities, recorded_pid
from rlcore.runs.rundir import COMPONENTS, RunDir, steps_in
from rlcore.secrets import redact, redact_text

T = TypeVar("T")
LOG_TAIL_LINES = 40
LOG_SCAN = Bound("a log's attempts", 4 * MIB)
MAX_LOG_LINE_CHARS = 4_000
DISK_CACHE_S = 30.0
LIVE = ("starting", "running")
CONFIG_ORDER = ("rl", "trainer", "orchestrator", "inference", "sft")


class FileCache:
    """What was read from each file, kept with the file's identity (device, inode, size,
    modification and change times) and given again while that is unchanged: a page polled
    every 2 s reads a file once per change, never per poll. A file that could not be read is
    remembered as such too."""

    def __init__(self):
        self.entries: dict[tuple, tuple[tuple, Any]] = {}

    def get(self, path: Path, read: Callable[[Path], T], kind: str = "") -> T:
        key = identity(path)
        found = self.entries.get((path, kind))
        if found is None or found[0] != key or not key:
            try:
                value: Any = read(path)
            except Damaged as err:
                err.__traceback__ = None
                value = err
            found = self.entries[(path, kind)] = (key, value)
        if isinstance(found[1], Damaged):
            raise found[1]
        return found[1]


def identity(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except OSError:
        return ()
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class RunData:
    """Readers of one run folder (`root`, found under the command line's `folder`)."""

    def __init__(self, root: Path, folder: Path):
        self.root, self.folder = root, folder
        self.run = RunDir(root)
        self.curves_cache = Curves()
        self.ends_cache = Curves()
        self.disk: tuple[float, float] | None = None
        self.listings: dict[tuple, tuple[int, list[str]]] = {}
        self.cache = FileCache()
        self.step_cache: OrderedDict = OrderedDict()
        self.results_cache: OrderedDict = OrderedDict()
        self.lock = threading.RLock()
        """Held while the curves or an archive step are read (pages read on several threads)."""

    @property
    def name(self) -> str:
        relative = self.root.relative_to(self.folder) if self.root != self.folder else None
        return shown(relative if relative else self.root.name)

    def file(self, *parts: str) -> Path | None:
        """A regular file of the run, checked (safe.inside); None where it is missing, refused
        or not a regular file."""
        try:
            return safe.inside(self.root, *parts)
        except (safe.Missing, safe.Refused):
            return None

    def real(self, *parts: str) -> Path | None:
        """Where an entry of the run really is (links followed), proved inside the run; None
        where there is none; Damaged where it leads out of the run. Whether it is a regular
        file is for rlcore.files.readback to say."""
        try:
            return safe.inside(self.root, *parts, kind="any")
        except safe.Missing:
            return None
        except safe.Refused as err:
            raise Damaged(self.root.joinpath(*parts), str(err)) from None

    def identity(self, *parts: str) -> tuple:
        path = self.real(*parts)
        return identity(path) if path is not None else ()

    def read(self, parts: tuple[str, ...], reader: Callable[[Path], T]) -> T | None:
        """`reader(path)` of the run's file at `parts`, once per change of the file (FileCache);
        None where there is no such file; Damaged where it cannot be read."""
        path = self.real(*parts)
        if path is None:
            return None
        try:
            return self.cache.get(path, reader, kind=getattr(reader, "__qualname__", ""))
        except FileNotFoundError:
            return None

    # -- status --------------------------------------------------------------------------------
    def state(self) -> RunState:
        """run.json read back and checked (rlcore.runs.run_json); a damaged one is `problem`."""
        try:
            record = self.read(("run.json",), lambda path: run_json.read(path, self.root))
        except Damaged as err:
            return RunState({}, str(err))
        return RunState({} if record is None else record.data)

    def status(self, state: RunState | None = None) -> tuple[str, str]:
        """(status, why): run.json's status, and "not running here" for a run it calls live
        whose launcher cannot be proved to be running on this machine (a copied run, a
        killed launcher)."""
        state = state or self.state()
        if state.problem:
            return "unreadable", state.problem
        recorded = state.data.get("status")
        if recorded is None:
            return self.status_without_state(), ""
        recorded = str(recorded)
        if recorded not in LIVE:
            return recorded, failure(state)
        record = identities(state).get(procs.LAUNCHER)
        if not procs.is_record(record):
            pid = recorded_pid(state, procs.LAUNCHER)
            if pid is not None and procs.pid_alive(pid):
                return recorded, f"pid {pid} is alive (not proved: no identity recorded)"
            return "not running here", "run.json records no live launcher"
        try:
            found = procs.verify(record, "this run's launcher")
        except Exception as err:  # a forged record: proves nothing
            return "not running here", f"run.json's launcher record is damaged ({one_line(err)})"
        if isinstance(found, psutil.Process):
            return recorded, ""
        return "not running here", found

    def status_without_state(self) -> str:
        if self.kind() == "eval":
            return "finished" if self.eval_steps() else "no results yet"
        return "no run.json"

    def kind(self) -> str:
        try:
            marker = self.read((".rl-run",), self.read_marker) or {}
        except Damaged:
            marker = {}
        kind = marker.get("kind")
        if kind in ("rl", "sft", "eval"):
            return kind
        if self.file("eval.toml"):
            return "eval"
        return "sft" if self.file("configs", "sft.toml") else "rl"

    def waits(self) -> list[str]:
        """What each live component records it waits for, as `rl status` words it."""
        found = []
        names = [
            *COMPONENTS,
            *(
                n[:-5]
                for n in self.names("state")
                if n.startswith("inference-") and n.endswith(".json")
            ),
        ]
        for name in names:
            try:
                record = self.read(("state", f"{name}.json"), self.read_state_file)
                if not isinstance(record, dict) or not procs.pid_alive(record.get("pid")):
                    continue
                for wait in waits.open_waits(record):
                    found.append(
                        shown(
                            f"{name}: waiting for {wait['waiting_for']} from "
                            f"{waits.peer_words(wait)}",
                            500,
                        )
                    )
            except (Damaged, TypeError, ValueError, KeyError, AttributeError) as err:
                found.append(shown(f"{name}: {err}", 500))
        return found

    def read_marker(self, path: Path) -> dict:
        return readback.read_object(path, readback.MARKER, self.root)

    def read_state_file(self, path: Path) -> dict:
        return readback.read_object(path, readback.STATE, self.root)

    # -- curves and summary --------------------------------------------------------------------
    def curves(self) -> Curves:
        """metrics.jsonl as curves, brought up to date (launcher.view.curves.refresh: bounded,
        nothing read for an unchanged file); Damaged where it is not a regular file."""
        path = self.real("metrics.jsonl")
        if path is None:
            self.curves_cache = Curves()
        else:
            self.curves_cache = refresh(self.curves_cache, path, self.root)
        return self.curves_cache

    def brief_curves(self) -> Curves:
        """The curves read so far when they are current, else the file's ends only (enough
        for a list of runs, whatever the run's length), read once per change of the file."""
        path = self.real("metrics.jsonl")
        if path is None:
            return Curves()
        key = file_key(path)
        if self.curves_cache.key and self.curves_cache.key == key:
            return self.curves_cache
        if not self.ends_cache.key or self.ends_cache.key != key:
            self.ends_cache = ends(path, self.root)
        return self.ends_cache

    def summary(self, brief: bool = False, disk: bool = True) -> dict[str, Any]:
        """The run in one record (the runs list, a page's heading); `brief` reads only the
        ends of metrics.jsonl unless its curves are in memory already; `disk` adds up the
        sizes of its files (10,000 archived steps take a tenth of a second). A run that cannot
        be read is a record saying so (status "damaged"), never an error."""
        try:
            if brief:
                return self.read_summary(brief, disk)
            with self.lock:
                return self.read_summary(brief, disk)
        except Exception as err:  # any damage: the list of runs must still show the others
            return {
                "name": self.name,
                "path": shown(self.root),
                "kind": "?",
                "status": "damaged",
                "why": one_line(err),
                "model": "",
                "envs": [],
                "step": None,
                "max_steps": None,
                "last5_reward": None,
                "wall_s": None,
                "machine": "",
                "disk_gib": None,
                "updated": None,
                "serving": [],
                "time": "",
            }

    def read_summary(self, brief: bool, disk: bool) -> dict[str, Any]:
        state = self.state()
        status, why = self.status(state)
        try:
            curves = self.brief_curves() if brief else self.curves()
        except Damaged as err:
            curves, status, why = Curves(), "damaged", str(err)
        configs = self.config_data()
        recorded = state.data.get("machine")
        machine = recorded if isinstance(recorded, dict) else {}
        wall = None
        if curves.first_time is not None and curves.last_time is not None:
            wall = curves.last_time - curves.first_time
        return readback.json_safe(
            {
                "name": self.name,
                "path": shown(self.root),
                "kind": self.kind(),
                "status": status,
                "why": shown(why, 1000),
                "model": model_name(configs),
                "envs": env_ids(configs),
                "step": curves.last_step.get("trainer", curves.last_step.get("orchestrator")),
                "max_steps": max_steps(configs),
                "last5_reward": last_mean(curves, "orchestrator", "reward"),
                "wall_s": wall,
                "machine": machine_words(machine),
                "disk_gib": self.disk_gib() if disk else None,
                "updated": curves.last_time,
                "serving": self.serving(state, status),
                "time": self.time_words(state, status),
            }
        )

    def time_words(self, state: RunState, status: str) -> str:
        """The time left and expected finish of a live run, or a finished run's estimate
        against what it took (rlcore.forecast.progress, as `rl status` says it); '' without
        an estimate, and for a run not running here."""
        from rlcore.forecast.progress import status_line
        from rlcore.reporting.metrics import read_last_records

        if status not in (*LIVE, "finished", "failed", "stopped"):
            return ""
        records = read_last_records(self.run.metrics, self.root) if status in LIVE else []
        try:
            words = status_line(state.data, records, time.time())
        except (ArithmeticError, TypeError, ValueError):  # forged figures: no words
            return ""
        return shown(words, 300) if words else ""

    def serving(self, state: RunState, status: str) -> list[str]:
        """The inference servers of a live run, as run.json records them (the port rl chose,
        never an assumed 8000; checked by rlcore.runs.run_json); none once it has ended."""
        urls = state.data.get("inference_urls")
        if status not in LIVE or not isinstance(urls, list):
            return []
        return [shown(url, 200) for url in urls if isinstance(url, str)]

    def disk_gib(self) -> float:
        """Bytes of the run's files (links not followed), cached for DISK_CACHE_S."""
        now = time.monotonic()
        if self.disk is None or now - self.disk[0] > DISK_CACHE_S:
            self.disk = (now, disk_use_gib(self.root))
        return self.disk[1]

    # -- configs, checkpoints, logs --------------------------------------------------------------
    def config_files(self) -> list[tuple[str, tuple[str, ...]]]:
        """(name, parts) of each resolved config the run holds."""
        names = [n for n in self.names("configs") if n.endswith(".toml")]
        found: list[tuple[str, tuple[str, ...]]] = [(shown(n[:-5]), ("configs", n)) for n in names]
        found.sort(key=lambda f: (CONFIG_ORDER.index(f[0]) if f[0] in CONFIG_ORDER else 99, f[0]))
        if self.real("eval.toml"):
            found.insert(0, ("eval", ("eval.toml",)))
        return found

    def config_data(self) -> dict[str, dict]:
        """Each resolved config as data, secrets redacted again; {"error": ...} for one that
        cannot be read or does not parse."""
        configs = {}
        for name, parts in self.config_files():
            try:
                configs[name] = self.read(parts, self.read_config) or {}
            except Damaged as err:
                configs[name] = {"error": str(err)}
        return configs

    def read_config(self, path: Path) -> dict:
        """A config file as data (TOML, within readback.CONFIG and JSON_DEPTH), redacted."""
        text = readback.read_text(path, readback.CONFIG, self.root)
        try:
            data = tomllib.loads(readback.clean_text(text))
        except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
            raise Damaged(path, f"does not parse ({one_line(err)[:200]})") from None
        if readback.nesting(data, readback.JSON_DEPTH) > readback.JSON_DEPTH:
            raise Damaged(path, f"nested deeper than {readback.JSON_DEPTH} levels")
        return redact(data)

    def config_texts(self) -> list[tuple[str, str]]:
        """Each resolved config as TOML text to show, redacted again (rlcore.secrets)."""
        import tomli_w

        texts = []
        for name, data in self.config_data().items():
            if set(data) == {"error"}:
                texts.append((name, str(data["error"])))
                continue
            try:
                texts.append((name, redact_text(tomli_w.dumps(data))))
            except (TypeError, ValueError) as err:
                texts.append((name, f"cannot be shown as TOML ({one_line(err)[:200]})"))
        return texts

    def checkpoints(self) -> list[dict]:
        """Every checkpoint folder: complete (MANIFEST) or which parts are done."""
        folder = self.file_dir("checkpoints")
        if folder is None:
            return []
        found = []
        for step in steps_in(folder):
            done = [
                p
                for p in ("trainer", "orchestrator")
                if self.file("checkpoints", f"step_{step}", p, "DONE")
            ]
            complete = self.file("checkpoints", f"step_{step}", "MANIFEST") is not None
            found.append({"step": step, "complete": complete, "parts": done})
        return found

    def log_tails(self, num_lines: int = LOG_TAIL_LINES) -> list[tuple[str, list[str]]]:
        """The last lines of each log (readback.LOG_TAIL of it at most), each redacted as
        commands' output is (`redact_text`) and cut at MAX_LOG_LINE_CHARS."""
        tails = []
        names = sorted((n for n in self.names("logs") if n.endswith(".log")), key=log_order)
        for name in names:
            try:
                lines = self.read(("logs", name), self.read_log_tail) or []
            except Damaged as err:
                lines = [str(err)]
            tails.append((shown(name[:-4]), lines[-num_lines:]))
        return tails

    def read_log_tail(self, path: Path) -> list[str]:
        data, start = readback.read_tail(path, readback.LOG_TAIL, self.root)
        lines = readback.decode(data).splitlines()
        if start > 0 and lines:
            lines = lines[1:]  # the first line of a tail may be cut
        return [
            redact_text(readback.clean_text(line[:MAX_LOG_LINE_CHARS])) for line in lines[-500:]
        ]

    def restarts(self) -> int:
        """Attempts after the first, counted from the attempt headers in the trainer's log (its
        last LOG_SCAN bytes: in a longer log the first attempt's header lies before them)."""
        for name in ("trainer.log", "orchestrator.log"):
            try:
                found = self.read(("logs", name), self.count_attempts)
            except Damaged:
                continue
            if found is not None:
                return found
        return 0

    def count_attempts(self, path: Path) -> int:
        tail, start = readback.read_tail(path, LOG_SCAN, self.root)
        return max(0, len(ATTEMPT_HEADER.findall(tail)) - (1 if start == 0 else 0))

    # -- folders -------------------------------------------------------------------------------
    def file_dir(self, *parts: str) -> Path | None:
        try:
            return safe.inside(self.root, *parts, kind="dir")
        except (safe.Missing, safe.Refused):
            return None

    def names(self, *parts: str) -> list[str]:
        """The entry names of a folder of the run (at most MAX_NAMES), cached until the folder
        changes (its modification time): the archive's 10,000 names are listed once per new
        step."""
        folder = self.file_dir(*parts)
        if folder is None:
            return []
        try:
            changed = folder.stat().st_mtime_ns
            cached = self.listings.get(parts)
            if cached is None or cached[0] != changed:
                with os.scandir(folder) as entries:
                    listed = [
                        entry.name for _, entry in zip(range(MAX_NAMES), entries, strict=False)
                    ]
                cached = self.listings[parts] = (changed, sorted(listed))
        except OSError:
            return []
        return cached[1]

    def listing(self, *parts: str) -> list[Path]:
        folder = self.file_dir(*parts)
        return [folder / name for name in self.names(*parts)] if folder else []

    def eval_steps(self) -> list[int]:
        from launcher.view.archive import eval_steps

        return eval_steps(self)


MAX_NAMES = 100_000
"""Entries of one folder of a run that the view lists."""
ATTEMPT_HEADER = re.compile(rb"^===== attempt ", re.M)


def log_order(name: str) -> tuple:
    order = ("rl.log", "inference.log", "orchestrator.log", "trainer.log")
    return (order.index(name) if name in order else len(order), name)


def failure(state: RunState) -> str:
    """What run.json says ended a run, in `rl status`' words."""
    data = state.data
    if data.get("failed_component"):
        return f"{data['failed_component']} failed (exit code {data.get('exit_code')})"
    if data.get("signal"):
        return f"stopped by signal {data['signal']}"
    return ""


def one_line(err: BaseException) -> str:
    """An error as one printable line (an OSError names its file)."""
    if isinstance(err, OSError) and err.filename:
        text = f"{shown(err.filename)}: {err.strerror or err.__class__.__name__}"
    else:
        text = str(err) or err.__class__.__name__
    return shown(" ".join(text.split()), 1000)


def model_name(configs: dict[str, dict]) -> str:
    for name in ("trainer", "orchestrator", "sft", "eval", "inference"):
        model = configs.get(name, {}).get("model")
        if isinstance(model, dict) and model.get("name") not in (None, "None"):
            return str(model["name"])
    return ""


def env_ids(configs: dict[str, dict]) -> list[str]:
    envs = configs.get("orchestrator", {}).get("env")
    if not isinstance(envs, list):
        evals = configs.get("eval", {}).get("eval")
        envs = evals.get("env") if isinstance(evals, dict) else None
    if not isinstance(envs, list):
        return []
    return [str(e.get("id")) for e in envs if isinstance(e, dict) and e.get("id")]


def max_steps(configs: dict[str, dict]) -> int | None:
    for name in ("trainer", "orchestrator", "sft"):
        value = configs.get(name, {}).get("max_steps")
        if isinstance(value, int):
            return value
    return None


def machine_words(machine: dict) -> str:
    if not machine:
        return ""
    gpus = machine.get("num_gpus")
    gpu = f", {gpus} x {machine.get('gpu_name') or 'GPU'}" if gpus else ""
    cpus = machine.get("num_cpus", "?")
    return f"{machine.get('model', '?')} ({machine.get('isa', '?')}), {cpus} CPUs{gpu}"
