"""The run directory (`output_dir`), defined once for every process: its layout, the lifecycle
of an attempt (resume resolution, refusing a used directory, dropping what a new attempt must not
see), the checkpoint-step rule and the checkpoint markers. See docs/architecture.md.

configs/<component>.toml   logs/<component>.log   metrics.jsonl   run.json
rollouts/step_<n>/         weights/step_<n>/ + STABLE
samples/step_<n>.parquet   evals/step_<n>/{results.jsonl,summary.json}
checkpoints/step_<n>/{trainer/,orchestrator/,configs/,MANIFEST}   each part gets DONE when complete
"""

import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil

from rlcore.errors import ConfigError
from rlcore.files.atomic import append_line, atomic_write_text, fsync_tree
from rlcore.files.readback import CONFIG, SMALL, Damaged, read_object, read_text
from rlcore.runs import attempt
from rlcore.runs.ownership import claim
from rlcore.runs.runguard import RL, Entry, check_run, open_run

COMPONENTS = ("trainer", "orchestrator", "inference")
"""The three processes of a run (each has its config and log file here)."""
STABLE = "STABLE"
MANIFEST = "MANIFEST"
DONE = "DONE"
CHECKPOINT_PARTS = ("trainer", "orchestrator")
"""The parts of a checkpoint; MANIFEST is written once all of a step's parts are DONE."""
_STEP_DIR = re.compile(r"^step_(\d+)$")


def step_name(step: int) -> str:
    return f"step_{step}"


def steps_in(folder: Path) -> list[int]:
    """Step numbers of the `step_<n>` folders directly inside `folder`, ascending."""
    if not folder.is_dir():
        return []
    found = (_STEP_DIR.match(p.name) for p in folder.iterdir() if p.is_dir())
    return sorted(int(m.group(1)) for m in found if m)


class RunDir:
    """Paths and small helpers for one run directory (`output_dir`)."""

    def __init__(self, root: Path | str):
        self.root = Path(root)

    def claim(self) -> str:
        """Make this folder a run (or check that it is one) before writing into it; returns
        the run's id. A ConfigError when it is a file or holds things that are not a run's
        (rlcore.runs.ownership)."""
        return claim(self.root)

    # -- paths ---------------------------------------------------------------------------------
    @property
    def configs(self) -> Path:
        return self.root / "configs"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    @property
    def samples(self) -> Path:
        """The rollout archive: every rollout, one Parquet file per step
        (rlcore.contracts.samples_store)."""
        return self.root / "samples"

    @property
    def evals(self) -> Path:
        """In-run evaluations: `step_<n>/{results.jsonl,summary.json}` (as `evals` writes)."""
        return self.root / "evals"

    @property
    def weights(self) -> Path:
        return self.root / "weights"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def transfer(self) -> Path:
        """The collective transport's signal files (rlcore.contracts.collective)."""
        return self.root / "transfer"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def admin_token(self) -> Path:
        """The inference admin routes' token (owner-only), when inference binds beyond
        loopback."""
        return self.root / "admin_token"

    def config_file(self, component: str) -> Path:
        return self.configs / f"{component}.toml"

    def log_file(self, component: str) -> Path:
        return self.logs / f"{component}.log"

    def rollout_dir(self, step: int) -> Path:
        return self.rollouts / step_name(step)

    def weight_dir(self, step: int) -> Path:
        return self.weights / step_name(step)

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints / step_name(step)

    # -- weights -------------------------------------------------------------------------------
    def weights_stable(self, step: int) -> bool:
        return (self.weight_dir(step) / STABLE).exists()

    def mark_weights_stable(self, step: int) -> None:
        """STABLE vouches for the folder: it is written once every file in it is on disk."""
        fsync_tree(self.weight_dir(step))
        atomic_write_text(self.weight_dir(step) / STABLE, json.dumps(attempt.stamp()) + "\n")

    def weights_stamp(self, step: int) -> dict[str, Any] | None:
        """Who marked `weights/step_<step>` STABLE (rlcore.runs.attempt); None if nobody did, or an
        older layout did (a bare time)."""
        try:
            return read_object(self.weight_dir(step) / STABLE, SMALL, self.root)
        except (OSError, Damaged):
            return None

    # -- checkpoints ---------------------------------------------------------------------------
    def complete_checkpoints(self) -> list[int]:
        """Steps whose checkpoint has a MANIFEST (both parts complete), ascending."""
        return [s for s in steps_in(self.checkpoints) if self.checkpoint_complete(s)]

    def checkpoint_complete(self, step: int) -> bool:
        return (self.checkpoint_dir(step) / MANIFEST).exists()

    def latest_checkpoint(self) -> int | None:
        steps = self.complete_checkpoints()
        return steps[-1] if steps else None

    def resolve_resume_step(self, resume_step: int | None) -> int | None:
        """-1 becomes the latest complete checkpoint; a named step must be complete."""
        if resume_step is None:
            return None
        if resume_step == -1:
            return self.latest_checkpoint()
        if resume_step > 0 and not self.checkpoint_complete(resume_step):
            have = self.complete_checkpoints()
            raise ConfigError(
                f"no complete checkpoint for step {resume_step} in {self.checkpoints} "
                f"(complete: {have or 'none'}); use --ckpt.resume-step -1 for the latest"
            )
        return resume_step

    def part_dir(self, step: int, part: str) -> Path:
        """`checkpoints/step_<n>/<part>/`, one of CHECKPOINT_PARTS."""
        assert part in CHECKPOINT_PARTS, part
        return self.checkpoint_dir(step) / part

    def part_done(self, step: int, part: str) -> bool:
        return (self.part_dir(step, part) / DONE).exists()

    def mark_part_done(self, step: int, part: str, parts: Iterable[str] = CHECKPOINT_PARTS) -> bool:
        """Mark one part complete, then write MANIFEST if every part in `parts` is; True when the
        checkpoint now counts. DONE is written once every file of the part is on disk."""
        self.keep_config(step, part)
        fsync_tree(self.part_dir(step, part))
        atomic_write_text(self.part_dir(step, part) / DONE, f"{step}\n")
        return self.write_manifest_if_complete(step, parts)

    def keep_config(self, step: int, part: str) -> None:
        """The resolved config this attempt's `part` runs with, kept with its checkpoint
        (`checkpoints/step_<n>/configs/<part>.toml`): a run resumed from it can be compared
        with the config it resumed from (`rl view`'s compare page)."""
        source = self.config_file(part)
        if source.is_file():
            text = read_text(source, CONFIG, self.root)
            atomic_write_text(self.checkpoint_dir(step) / "configs" / f"{part}.toml", text)

    def write_manifest_if_complete(self, step: int, parts: Iterable[str]) -> bool:
        """Write MANIFEST once every part has its own DONE marker; True if written now or before."""
        folder = self.checkpoint_dir(step)
        if (folder / MANIFEST).exists():
            return True
        parts = list(parts)
        if not all(self.part_done(step, part) for part in parts):
            return False
        atomic_write_text(folder / MANIFEST, json.dumps({"step": step, "parts": parts}) + "\n")
        return True

    # -- the lifecycle of an attempt -----------------------------------------------------------
    def check_attempt(self, resume_step: int | None, entry: Entry = RL) -> int | None:
        """The concrete step a new attempt of `entry` resumes from (None: a fresh start),
        without touching anything: the folder passes `entry`'s guard (rlcore.runs.runguard: its
        kind, holders, links), and a fresh start in a directory that holds complete checkpoints is
        refused: they are never overwritten silently."""
        check_run(self.root, entry)
        complete = self.complete_checkpoints()
        if resume_step is None and complete:
            raise ConfigError(
                f"output_dir {self.root} holds checkpoints (steps {complete}) from an earlier "
                "run: resume it with --ckpt.resume-step -1, start elsewhere with --output-dir, "
                "or (with rl) delete everything in it with --clean"
            )
        return self.resolve_resume_step(resume_step) or None

    def drop_stale(self, start: int, produces: Iterable[str]) -> None:
        """Delete what an attempt starting after `start` steps regenerates: batches >= start
        (`rollouts`) and policies > start (`weights`). Each process drops only what it produces
        itself, so a peer that started first never loses its output."""
        for kind in produces:
            if kind == "rollouts":
                remove_steps(self.rollouts, lambda n: n < start)
            elif kind == "weights":
                remove_steps(self.weights, lambda n: n <= start)
            else:
                raise AssertionError(f"unknown run-directory output {kind!r}")

    def prepare_attempt(
        self, resume_step: int | None, produces: Iterable[str], entry: Entry = RL
    ) -> int | None:
        """`check_attempt`, then claim and hold the folder as `entry` does (rlcore.runs.runguard:
        a component alone never beside a running `rl`) and `drop_stale` for the outputs this
        process produces."""
        step = self.check_attempt(resume_step, entry)
        open_run(self.root, entry)
        self.drop_stale(step or 0, produces)
        return step

    # -- metrics -------------------------------------------------------------------------------
    def append_metrics(self, component: str, step: int, metrics: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        record = {"component": component, "step": step, "time": time.time(), **metrics}
        record.setdefault("rss_mib", resident_mib())
        append_line(self.metrics, json.dumps(record))


def record_state(run: RunDir, status: str, **state: object) -> None:
    """run.json: the run's status for `rl status/list/stop` (inside a SLURM job, its id too)."""
    if "SLURM_JOB_ID" in os.environ:
        state.setdefault("slurm_job_id", os.environ["SLURM_JOB_ID"])
    state = {"status": status, **state, "updated": time.time()}
    atomic_write_text(run.run_json, json.dumps(state, indent=2) + "\n")


def resident_mib() -> float:
    """This process's resident memory now (MiB; 0 where it cannot be read): every metrics
    record carries it, so a run's memory growth can be read back step by step."""
    try:
        return round(psutil.Process().memory_info().rss / 2**20, 1)
    except psutil.Error:
        return 0.0


def is_checkpoint_step(step: int, interval: int | None, max_steps: int, enabled: bool) -> bool:
    """The checkpoint rule both sides follow: every `interval` steps and after the last one."""
    if not enabled:
        return False
    return step == max_steps or (interval is not None and step % interval == 0)


def remove_steps(folder: Path, keep: Any) -> None:
    """Delete `step_<n>` folders in `folder` for which `keep(n)` is false."""
    for step in steps_in(folder):
        if not keep(step):
            path = folder / step_name(step)
            if path.is_symlink():  # never follow a link out of the run
                path.unlink(missing_ok=True)
            else:
                shutil.rmtree(path, ignore_errors=True)
