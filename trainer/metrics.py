"""Per-step metrics: one console line, one metrics.jsonl record, and W&B when configured."""

import logging
import os
from typing import Any

from rlcore.config import WandbConfig
from rlcore.rundir import RunDir

logger = logging.getLogger("trainer")

COMPONENT = "trainer"


class MetricsLogger:
    """Rank 0's sink for step metrics. W&B runs offline when no WANDB_API_KEY is set (unless
    `wandb.offline` says otherwise) and continues the same run id on resume."""

    def __init__(self, run_dir: RunDir, wandb_config: WandbConfig, config: dict[str, Any]):
        self.run_dir = run_dir
        self.wandb_run = None
        self.wandb_config = wandb_config
        self.config = config

    def start_wandb(self, run_id: str | None) -> str | None:
        """Start (or continue, given its id) the W&B run; returns its id, None if disabled."""
        cfg = self.wandb_config
        if cfg.project is None:
            return None
        import wandb

        offline = cfg.offline if cfg.offline is not None else not os.environ.get("WANDB_API_KEY")
        self.wandb_run = wandb.init(
            project=cfg.project,
            name=cfg.name,
            entity=cfg.entity,
            tags=cfg.tags,
            config=self.config,
            dir=str(self.run_dir.root),
            mode="offline" if offline else "online",
            id=run_id,
            resume="allow" if run_id else None,
        )
        return self.wandb_run.id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run_dir.append_metrics(COMPONENT, step, metrics)
        if self.wandb_run is not None:
            self.wandb_run.log({f"{COMPONENT}/{k}": v for k, v in metrics.items()}, step=step)
        logger.info(format_line(step, metrics))

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


def format_line(step: int, metrics: dict[str, float]) -> str:
    shown = ("loss", "entropy", "mismatch_kl", "clip_frac", "grad_norm", "lr")
    parts = [f"{k} {metrics[k]:.4g}" for k in shown if k in metrics]
    parts.append(f"{metrics.get('tokens_per_s', 0):.0f} tok/s")
    parts.append(f"{metrics.get('step_time_s', 0):.2f} s")
    parts.append(f"mem {metrics.get('peak_memory_gib', 0):.2f} GiB")
    return f"step {step} | " + " | ".join(parts)
