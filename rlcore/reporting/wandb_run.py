"""The one W&B setup. A run has ONE W&B run: the orchestrator owns it and relays the trainer's
records from metrics.jsonl (each component's metrics under its own prefix and its own step
axis, `<component>/step`); a trainer running alone on synthetic data, or an SFT run, owns it
instead. Its id is stored in the owner's checkpoint, so a resumed run continues the same W&B
run, and with its settings in the run's `state/wandb.json`, where `evals --watch` finds the run
to continue once its owner has ended.

W&B runs offline when no WANDB_API_KEY is set (unless `wandb.offline` says otherwise). Keys
come from the environment or `.env` and are never written anywhere. `wandb` is imported only
when a run starts."""

import json
import os
from pathlib import Path
from typing import Any

from rlcore.config.base import WandbConfig
from rlcore.files.atomic import atomic_write_text
from rlcore.files.readback import STATE, Damaged, read_object
from rlcore.reporting.metrics import read_records
from rlcore.runs.rundir import RunDir
from rlcore.secrets import dotenv, redact


def load_dotenv(path: Path = Path(".env")) -> None:
    """The variables `.env` sets, into the environment (never overriding, never logged), where
    wandb reads its key and entity."""
    for key, value in dotenv(str(path)).items():
        os.environ.setdefault(key, value)


class WandbRun:
    """A W&B run that takes metrics.jsonl-style records from any component."""

    def __init__(self, run):
        self.run = run
        self.id = run.id
        self.axes: set[str] = set()

    def log(self, component: str, step: int, metrics: dict[str, Any]) -> None:
        if component not in self.axes and hasattr(self.run, "define_metric"):
            self.run.define_metric(f"{component}/step")
            self.run.define_metric(f"{component}/*", step_metric=f"{component}/step")
            self.axes.add(component)
        data = {f"{component}/{k}": v for k, v in metrics.items() if _loggable(v)}
        self.run.log({**data, f"{component}/step": step})

    def finish(self) -> None:
        self.run.finish()


def _loggable(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) or value is None


def start_wandb(
    config: WandbConfig, run_dir: RunDir, run_id: str | None, run_config: dict[str, Any]
) -> WandbRun | None:
    """Start (or, given its id, continue) the W&B run; None when `wandb.project` is unset."""
    if config.project is None:
        return None
    load_dotenv()
    import wandb

    offline = config.offline if config.offline is not None else not os.environ.get("WANDB_API_KEY")
    run = wandb.init(
        project=config.project,
        entity=config.entity,
        name=config.name,
        tags=config.tags,
        id=run_id,
        resume="allow" if run_id else None,
        dir=str(run_dir.root),
        mode="offline" if offline else "online",
        config=redact(run_config),
    )
    path = run_dir.root / "state" / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    settings = config.model_dump(mode="json")
    atomic_write_text(path, json.dumps({"id": run.id, "settings": settings}) + "\n")
    return WandbRun(run)


STATE_FILE = "wandb.json"
"""In the run's `state/`: the id and settings (no key) of the run's W&B run, once started."""


def continue_wandb(run_dir: RunDir) -> WandbRun | None:
    """Continue the run's W&B run from `state/wandb.json`; None when it never had one."""
    try:
        found = read_object(run_dir.root / "state" / STATE_FILE, STATE, run_dir.root)
        config, run_id = WandbConfig.model_validate(found["settings"]), str(found["id"])
    except (OSError, Damaged, ValueError, KeyError, TypeError):
        return None
    return start_wandb(config, run_dir, run_id, {})


class Relay:
    """Forwards another component's records from metrics.jsonl into a W&B run."""

    def __init__(self, run_dir: RunDir, component: str):
        self.run_dir, self.component = run_dir, component
        self.offset = run_dir.metrics.stat().st_size if run_dir.metrics.exists() else 0
        self.last_step: int | None = None

    def forward(self, wandb_run: WandbRun) -> None:
        records, self.offset = read_records(self.run_dir.metrics, self.offset)
        for record in records:
            if record.get("component") != self.component:
                continue
            step = int(record["step"])
            metrics = {k: v for k, v in record.items() if k not in ("component", "step", "time")}
            wandb_run.log(self.component, step, metrics)
            self.last_step = step
