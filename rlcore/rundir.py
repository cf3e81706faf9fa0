"""The run-directory layout (DESIGN.md, Run directory), defined once for every process.

configs/<component>.toml   logs/<component>.log   metrics.jsonl   run.json
rollouts/step_<n>/         weights/step_<n>/ + STABLE
checkpoints/step_<n>/{trainer/,orchestrator/,MANIFEST}
"""

import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

STABLE = "STABLE"
MANIFEST = "MANIFEST"
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
    def weights(self) -> Path:
        return self.root / "weights"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

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
        (self.weight_dir(step) / STABLE).write_text(f"{time.time()}\n")

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
            raise FileNotFoundError(
                f"no complete checkpoint for step {resume_step} in {self.checkpoints} "
                f"(complete: {have or 'none'}); use --ckpt.resume-step -1 for the latest"
            )
        return resume_step

    def write_manifest_if_complete(self, step: int, parts: Iterable[str]) -> bool:
        """Write MANIFEST once every part has its own DONE marker; True if written now or before."""
        folder = self.checkpoint_dir(step)
        if (folder / MANIFEST).exists():
            return True
        parts = list(parts)
        if not all((folder / part / "DONE").exists() for part in parts):
            return False
        atomic_write_text(folder / MANIFEST, json.dumps({"step": step, "parts": parts}) + "\n")
        return True

    # -- metrics -------------------------------------------------------------------------------
    def append_metrics(self, component: str, step: int, metrics: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"component": component, "step": step, "time": time.time(), **metrics})
        with self.metrics.open("a") as f:
            f.write(line + "\n")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def remove_steps(folder: Path, keep: Any) -> None:
    """Delete `step_<n>` folders in `folder` for which `keep(n)` is false."""
    for step in steps_in(folder):
        if not keep(step):
            shutil.rmtree(folder / step_name(step), ignore_errors=True)
