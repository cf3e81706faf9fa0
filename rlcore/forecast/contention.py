"""How much longer an async run's step takes on this machine than its generation and training
one after the other: where both share the CPU's cores, each process's threads wait on the
other's, and how much depends on the machine (1.07-1.40 on a Zen 4 EPYC's two cores, 1.4-2.0
on a Zen 5 EPYC's, over the same jobs). The estimate takes SHARED_CORES_CONTENTION until a
finished async run on a CPU measured it here: its steady step over the estimate's generation,
training and publish (`measure`). The launcher keeps that under the machine's calibration
fingerprint, beside the calibration, pooled with what the earlier runs kept (`remember`), and
the next estimate on the same machine reads it back (`recall`) as data it did not write: through
the one bounded reader, the figure checked, anything else ignored.

The record holds figures only."""

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from rlcore.forecast.model import SHARED_CORES_CONTENTION

CONTENTION_VERSION = 1
"""Bumped when what is kept changes: older records are then ignored."""
BOUNDS = (0.8, 4.0)
"""What a measured or kept figure may be: outside it, a run disturbed by something else (or a
damaged record), ignored."""
HISTORY_WEIGHT = 3.0
"""When a run's figure is pooled with the earlier runs', those count at most this many times
the new one: each run counts about a quarter."""
MAX_RUNS = 1000
FINGERPRINT = re.compile(r"[0-9a-f]{8,64}")
"""A calibration fingerprint (rlcore.forecast.calibrate.fingerprint): hex digits only, so the
file's name never leaves its folder."""


@dataclass(frozen=True)
class Contention:
    """What the finished async runs on this machine measured."""

    factor: float
    """Their steady step over their generation, training and publish added up."""
    runs: int


def contention_file(fingerprint: str) -> Path:
    from rlcore.host.models import cache_dir

    return cache_dir() / "contention" / f"{fingerprint}.json"


def within(value: object) -> float | None:
    """`value` as a figure within BOUNDS, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value) if BOUNDS[0] <= value <= BOUNDS[1] else None


def recall(fingerprint: str) -> Contention | None:
    """The figure kept for this machine; None when there is none or it is damaged (read through
    the bounded reader: a FIFO, a huge, deep or non-UTF-8 file is refused)."""
    from rlcore.files.readback import read_kept

    if not FINGERPRINT.fullmatch(fingerprint or ""):
        return None
    found = read_kept(contention_file(fingerprint))
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


def remember(fingerprint: str, factor: float | None) -> None:
    """Keep a run's figure for the next estimate on this machine, pooled with the earlier runs'
    (they count at most HISTORY_WEIGHT times the new one; a damaged record is replaced). Best
    effort: a cache that cannot be written only leaves the next estimate at the default."""
    if factor is None or not FINGERPRINT.fullmatch(fingerprint or ""):
        return
    from rlcore.files.atomic import atomic_write_text

    earlier, runs = recall(fingerprint), 1
    if earlier is not None:
        weight = min(float(earlier.runs), HISTORY_WEIGHT)
        factor = (earlier.factor * weight + factor) / (weight + 1)
        runs = min(earlier.runs + 1, MAX_RUNS)
    record = {"version": CONTENTION_VERSION, "factor": round(factor, 4), "runs": runs}
    try:
        path = contention_file(fingerprint)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(record))
    except OSError:
        pass


def words(found: Contention | None) -> str:
    """The basis line saying which figure the async step took."""
    if found is None:
        return (
            f"async steps: generation and training added up x{SHARED_CORES_CONTENTION:.2f} "
            "(they share the cores); a finished async run measures this machine's own figure "
            "for the next estimate"
        )
    runs = "the last finished async run" if found.runs == 1 else f"{found.runs} finished runs"
    return (
        f"async steps: generation and training added up x{found.factor:.2f} (they share the "
        f"cores), as {runs} on this machine measured it"
    )
