"""One run as `rl view` reads it, lazily and read-only: its status (launcher.commands.runs'
readers; the launcher is proved by its recorded identity, rlcore.procs, but its lock is never
probed: a viewer must not take a run's lock even for an instant, when a starting `rl` could find
it held), summary, curves (launcher.view.curves, cached by the file's identity), configs
(redacted again, rlcore.secrets), checkpoints, log tails and what a live component waits for.
Every file goes through launcher.view.safe."""

import json
import os
import re
import time
import tomllib
from pathlib import Path
from typing import Any

import psutil

from launcher.commands.runs import RunState, identities, read_state, recorded_pid
from launcher.view import safe
from launcher.view.curves import Curves, ends, file_key, last_mean, refresh
from rlcore import procs, waits
from rlcore.ownership import read_marker
from rlcore.rundir import COMPONENTS, RunDir, steps_in
from rlcore.runlock import pid_alive
from rlcore.secrets import redact, redact_urls

LOG_TAIL_LINES = 40
LOG_TAIL_BYTES = 64_000
LOG_SCAN_BYTES = 4_000_000
MAX_CONFIG_BYTES = 1_000_000
DISK_CACHE_S = 30.0
LIVE = ("starting", "running")
CONFIG_ORDER = ("rl", "trainer", "orchestrator", "inference", "sft")


class RunData:
    """Readers of one run folder (`root`, found under the command line's `folder`)."""

    def __init__(self, root: Path, folder: Path):
        self.root, self.folder = root, folder
        self.run = RunDir(root)
        self.curves_cache = Curves()
        self.disk: tuple[float, float] | None = None
        self.listings: dict[tuple, tuple[int, list[str]]] = {}

    @property
    def name(self) -> str:
        relative = self.root.relative_to(self.folder) if self.root != self.folder else None
        return str(relative) if relative else self.root.name

    def file(self, *parts: str) -> Path | None:
        """A file of the run, checked (safe.inside); None where it is missing or refused."""
        try:
            return safe.inside(self.root, *parts)
        except (safe.Missing, safe.Refused):
            return None

    # -- status --------------------------------------------------------------------------------
    def state(self) -> RunState:
        if self.file("run.json") is None:
            return RunState({})
        return read_state(self.run)

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
            if pid is not None and pid_alive(pid):
                return recorded, f"pid {pid} is alive (not proved: no identity recorded)"
            return "not running here", "run.json records no live launcher"
        found = procs.verify(record, "this run's launcher")
        if isinstance(found, psutil.Process):
            return recorded, ""
        return "not running here", found

    def status_without_state(self) -> str:
        if self.kind() == "eval":
            return "finished" if self.eval_steps() else "no results yet"
        return "no run.json"

    def kind(self) -> str:
        kind = read_marker(self.root).get("kind") if self.file(".rl-run") else None
        if kind in ("rl", "sft", "eval"):
            return kind
        if self.file("eval.toml"):
            return "eval"
        return "sft" if self.file("configs", "sft.toml") else "rl"

    def waits(self) -> list[str]:
        """What each live component records it waits for, as `rl status` words it."""
        found = []
        names = [*COMPONENTS, *(p.stem for p in self.listing("state") if "inference-" in p.stem)]
        for name in names:
            path = self.file("state", f"{name}.json")
            record = read_json(path) if path else None
            if not isinstance(record, dict) or not pid_alive(record.get("pid")):
                continue
            for wait in waits.open_waits(record):
                found.append(f"{name}: waiting for {wait['waiting_for']} from "
                             f"{waits.peer_words(wait)}")  # fmt: skip
        return found

    # -- curves and summary --------------------------------------------------------------------
    def curves(self) -> Curves:
        path = self.file("metrics.jsonl")
        if path is None:
            self.curves_cache = Curves()
        else:
            self.curves_cache = refresh(self.curves_cache, path)
        return self.curves_cache

    def brief_curves(self) -> Curves:
        """The curves read so far when they are current, else the file's ends only (enough
        for a list of runs, whatever the run's length)."""
        path = self.file("metrics.jsonl")
        if path is None:
            return Curves()
        if self.curves_cache.key and self.curves_cache.key == file_key(path):
            return self.curves_cache
        return ends(path)

    def summary(self, brief: bool = False, disk: bool = True) -> dict[str, Any]:
        """The run in one record (the runs list, a page's heading); `brief` reads only the
        ends of metrics.jsonl unless its curves are in memory already; `disk` adds up the
        sizes of its files (10,000 archived steps take a tenth of a second)."""
        state = self.state()
        status, why = self.status(state)
        curves = self.brief_curves() if brief else self.curves()
        configs = self.config_data()
        machine = state.data.get("machine") if isinstance(state.data.get("machine"), dict) else {}
        wall = None
        if curves.first_time is not None and curves.last_time is not None:
            wall = curves.last_time - curves.first_time
        return {
            "name": self.name, "path": str(self.root), "kind": self.kind(),
            "status": status, "why": why, "model": model_name(configs), "envs": env_ids(configs),
            "step": curves.last_step.get("trainer", curves.last_step.get("orchestrator")),
            "max_steps": max_steps(configs), "last5_reward": last_mean(curves, "orchestrator",
                                                                      "reward"),
            "wall_s": wall, "machine": machine_words(machine),
            "disk_gib": self.disk_gib() if disk else None,
            "updated": curves.last_time,
        }  # fmt: skip

    def disk_gib(self) -> float:
        """Bytes of the run's files (links not followed), cached for DISK_CACHE_S."""
        from launcher.commands.runs import disk_use_gib

        now = time.monotonic()
        if self.disk is None or now - self.disk[0] > DISK_CACHE_S:
            self.disk = (now, disk_use_gib(self.root))
        return self.disk[1]

    # -- configs, checkpoints, logs --------------------------------------------------------------
    def config_files(self) -> list[tuple[str, Path]]:
        found = [(p.stem, p) for p in self.listing("configs") if p.suffix == ".toml"]
        found.sort(key=lambda f: (CONFIG_ORDER.index(f[0]) if f[0] in CONFIG_ORDER else 99, f[0]))
        if self.file("eval.toml"):
            found.insert(0, ("eval", self.root / "eval.toml"))
        return found

    def config_data(self) -> dict[str, dict]:
        """Each resolved config as data, secrets redacted again; {"error": ...} for one that
        does not parse."""
        configs = {}
        for name, path in self.config_files():
            checked = self.file(*path.relative_to(self.root).parts)
            if checked is None or checked.stat().st_size > MAX_CONFIG_BYTES:
                configs[name] = {"error": f"{path.name} is unreadable here"}
                continue
            try:
                configs[name] = redact(tomllib.loads(checked.read_text(errors="replace")))
            except (OSError, tomllib.TOMLDecodeError) as err:
                configs[name] = {"error": f"{path.name} does not parse: {err}"}
        return configs

    def config_texts(self) -> list[tuple[str, str]]:
        """Each resolved config as TOML text to show, redacted again (rlcore.secrets)."""
        import tomli_w

        texts = []
        for name, data in self.config_data().items():
            if set(data) == {"error"}:
                texts.append((name, data["error"]))
            else:
                texts.append((name, redact_urls(tomli_w.dumps(data))))
        return texts

    def checkpoints(self) -> list[dict]:
        """Every checkpoint folder: complete (MANIFEST) or which parts are done."""
        folder = self.file_dir("checkpoints")
        if folder is None:
            return []
        found = []
        for step in steps_in(folder):
            done = [p for p in ("trainer", "orchestrator") if self.file(
                "checkpoints", f"step_{step}", p, "DONE")]  # fmt: skip
            complete = self.file("checkpoints", f"step_{step}", "MANIFEST") is not None
            found.append({"step": step, "complete": complete, "parts": done})
        return found

    def log_tails(self, num_lines: int = LOG_TAIL_LINES) -> list[tuple[str, list[str]]]:
        tails = []
        for path in sorted(self.listing("logs"), key=lambda p: log_order(p.stem)):
            checked = self.file("logs", path.name)
            if checked is None or path.suffix != ".log":
                continue
            text = safe.read_tail(checked, LOG_TAIL_BYTES).decode(errors="replace")
            lines = text.splitlines()[-num_lines:]
            tails.append((path.stem, [redact_urls(line) for line in lines]))
        return tails

    def restarts(self) -> int:
        """Attempts after the first, counted from the attempt headers in the trainer's log (its
        last LOG_SCAN_BYTES: in a longer log the first attempt's header lies before them)."""
        path = self.file("logs", "trainer.log") or self.file("logs", "orchestrator.log")
        if path is None:
            return 0
        tail = safe.read_tail(path, LOG_SCAN_BYTES)
        first = 1 if path.stat().st_size <= LOG_SCAN_BYTES else 0
        return max(0, len(ATTEMPT_HEADER.findall(tail)) - first)

    # -- folders -------------------------------------------------------------------------------
    def file_dir(self, *parts: str) -> Path | None:
        try:
            return safe.inside(self.root, *parts, kind="dir")
        except (safe.Missing, safe.Refused):
            return None

    def names(self, *parts: str) -> list[str]:
        """The entry names of a folder of the run, cached until the folder changes (its
        modification time): the archive's 10,000 names are listed once per new step."""
        folder = self.file_dir(*parts)
        if folder is None:
            return []
        try:
            changed = folder.stat().st_mtime_ns
            cached = self.listings.get(parts)
            if cached is None or cached[0] != changed:
                cached = self.listings[parts] = (changed, sorted(os.listdir(folder)))
        except OSError:
            return []
        return cached[1]

    def listing(self, *parts: str) -> list[Path]:
        folder = self.file_dir(*parts)
        return sorted(folder.iterdir()) if folder else []

    def eval_steps(self) -> list[int]:
        from launcher.view.archive import eval_steps

        return eval_steps(self)


ATTEMPT_HEADER = re.compile(rb"^===== attempt ", re.M)


def log_order(name: str) -> tuple:
    order = ("rl", "inference", "orchestrator", "trainer")
    return (order.index(name) if name in order else len(order), name)


def failure(state: RunState) -> str:
    """What run.json says ended a run, in `rl status`' words."""
    data = state.data
    if data.get("failed_component"):
        return f"{data['failed_component']} failed (exit code {data.get('exit_code')})"
    if data.get("signal"):
        return f"stopped by signal {data['signal']}"
    return ""


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


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
