"""How much longer an async run's step takes on this machine than its generation and training
one after the other: where both share the CPU's cores, each process's threads wait on the
other's, and how much depends on the machine (1.07-1.40 on a Zen 4 EPYC's two cores, 1.4-2.0
on a Zen 5 EPYC's, over the same jobs). The estimate takes SHARED_CORES_CONTENTION until a
finished async run on a CPU measured it here: its steady step over the estimate's generation,
training and publish (`measure`). The launcher keeps that under the machine's calibration
fingerprint and the model's size (`key`: a decade of parameters, so that a tiny model's short
steps, mostly dispatch, do not stand for a larger one's), beside the calibration, pooled with
what the earlier runs of that size kept (`remember`), and the next estimate on the same machine
of a model of that size reads it back (`recall`) as data it did not write: through the one
bounded reader, the figure checked, anything else ignored.

The same record, under a kind of its own (`sft`, `sync`), keeps an SFT run's and a one-phase-
after-the-other run's pace: their steady step over their phases added up, which on a shared
virtual machine drifts from the cached calibration (a Zen 5 EPYC measured the same `rl sft`
steps at 3.6-3.95 s, then 4.6-5.4 s two hours later, its calibration 5-11% slower than cached).

The record holds figures only."""

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from rlcore.forecast.model import SHARED_CORES_CONTENTION

CONTENTION_VERSION = 2
"""Bumped when what is kept changes: older records are then ignored."""
BOUNDS = (0.5, 4.0)
"""What a measured or kept figure may be: outside it, a run disturbed by something else (or a
damaged record), ignored."""
HISTORY_WEIGHT = 3.0
"""When a run's figure is pooled with the earlier runs', those count at most this many times
the new one: each run counts about a quarter."""
MAX_RUNS = 1000
KINDS = ("async", "sft", "sync")
"""An async run on a CPU (the contention), an SFT run, a run with `async_level` 0 (the pace)."""
KEY = re.compile(r"[0-9a-f]{8,64}-p[0-9]{1,2}(-sft|-sync)?")
"""A calibration fingerprint (rlcore.forecast.calibrate.fingerprint: hex digits) and a size
(`key`): the file's name never leaves its folder."""
SIZE_UNITS = {0: "", 3: "K", 6: "M", 9: "B", 12: "T"}


@dataclass(frozen=True)
class Contention:
    """What the finished async runs on this machine measured."""

    factor: float
    """Their steady step over their generation, training and publish added up."""
    runs: int


def key(fingerprint: str, params: int, kind: str = "async") -> str:
    """Where a machine's figure for runs of `kind` (KINDS) of models of `params` parameters is
    kept: its calibration fingerprint, the parameters' decade (`p8`: 100M-1B) and the kind but
    `async`."""
    return f"{fingerprint}-p{decade(params)}" + ("" if kind == "async" else f"-{kind}")


def kind_of(sft: bool, async_level: int) -> str:
    return "sft" if sft else ("async" if async_level > 0 else "sync")


def decade(params: int) -> int:
    return min(max(int(math.log10(max(params, 1))), 0), 99)


def size_words(params: int) -> str:
    """The decade of `params` in words: `100M-1B`."""
    low = decade(params)
    return f"{number(low)}-{number(low + 1)}"


def number(power: int) -> str:
    """10**power in words: 100M."""
    unit = max(p for p in SIZE_UNITS if p <= power)
    return f"{10 ** (power - unit)}{SIZE_UNITS[unit]}"


def contention_file(key: str) -> Path:
    from rlcore.host.models import cache_dir

    return cache_dir() / "contention" / f"{key}.json"


def within(value: object) -> float | None:
    """`value` as a figure within BOUNDS, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if BOUNDS[0] <= value <= BOUNDS[1] else None


def recall(key: str) -> Contention | None:
    """The figure kept under `key` (this machine, a model size); None when there is none or it
    is damaged (read through the bounded reader: a FIFO, a huge, deep or non-UTF-8 file is
    refused)."""
    from rlcore.files.readback import read_kept

    if not KEY.fullmatch(key or ""):
        return None
    found = read_kept(contention_file(key))
    if found is None or found.get("version") != CONTENTION_VERSION:
        return None
    factor, runs = within(found.get("factor")), found.get("runs")
    if factor is None or isinstance(runs, bool) or not isinstance(runs, int):
        return None
    return Contention(factor, runs) if 1 <= runs <= MAX_RUNS else None


def measure(estimate: object, steady_s: float | None) -> float | None:
    """A finished run's figure: its steady step (seconds) over its estimate's generation,
    training and publish (run.json's `estimate`, `phases_s`); None where either is missing,
    damaged or the ratio is out of BOUNDS."""
    phases = estimate.get("phases_s") if isinstance(estimate, dict) else None
    if not isinstance(phases, dict) or steady_s is None:
        return None
    parts = [phases.get(k) for k in ("generate", "train", "publish")]
    numbers = [float(p) for p in parts if isinstance(p, int | float) and not isinstance(p, bool)]
    if len(numbers) != len(parts):
        return None
    total = sum(numbers)
    if not math.isfinite(total) or total <= 0 or not math.isfinite(steady_s):
        return None
    return within(steady_s / total)


def remember(key: str, factor: float | None) -> None:
    """Keep a run's figure under `key` for the next estimate on this machine of a model of its
    size, pooled with the earlier runs' (they count at most HISTORY_WEIGHT times the new one; a
    damaged record is replaced). Best effort: a cache that cannot be written only leaves the
    next estimate at the default."""
    if factor is None or not KEY.fullmatch(key or ""):
        return
    from rlcore.files.atomic import atomic_write_text

    earlier, runs = recall(key), 1
    if earlier is not None:
        weight = min(float(earlier.runs), HISTORY_WEIGHT)
        factor = (earlier.factor * weight + factor) / (weight + 1)
        runs = min(earlier.runs + 1, MAX_RUNS)
    record = {"version": CONTENTION_VERSION, "factor": round(factor, 4), "runs": runs}
    try:
        path = contention_file(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record))
    except OSError:
        pass


def words(found: Contention | None, params: int, kind: str = "async") -> str:
    """The basis line saying which figure the step took."""
    size = f"models of {size_words(params)} parameters"
    if kind != "async":
        one, many = ("sft run", "sft runs")
        if kind == "sync":
            one, many = ("run with async 0", "runs with async 0")
        if found is None:
            return f"steps as modelled; a finished {one} of {size} measures this machine's pace"
        runs = f"the last finished {one}" if found.runs == 1 else f"{found.runs} finished {many}"
        return (
            f"steps x{found.factor:.2f} the phases added up, as {runs} of {size} on this "
            "machine measured them"
        )
    if found is None:
        return (
            f"async steps: generation and training added up x{SHARED_CORES_CONTENTION:.2f} "
            f"(they share the cores); a finished async run of {size} measures this machine's "
            "own figure for the next estimate"
        )
    runs = "the last finished async run" if found.runs == 1 else f"{found.runs} finished runs"
    return (
        f"async steps: generation and training added up x{found.factor:.2f} (they share the "
        f"cores), as {runs} of {size} on this machine measured it"
    )
