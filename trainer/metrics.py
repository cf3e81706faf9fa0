"""Per-step metrics: one console line and one metrics.jsonl record. W&B: the orchestrator owns
the run's one W&B run and relays these records into it; only a trainer running alone on
synthetic data (`data.fake`, no orchestrator) and an SFT run log to W&B themselves
(rlcore.reporting.wandb_run), and then relay `evals --watch`'s records as the orchestrator would."""

import logging

from rlcore.config.base import WandbConfig
from rlcore.reporting.wandb_run import Relay, WandbRun, start_wandb
from rlcore.runs.rundir import RunDir

COMPONENT = "trainer"
logger = logging.getLogger("trainer")


class MetricsLogger:
    """Rank 0's sink for step metrics."""

    def __init__(self, run_dir: RunDir, wandb_config: WandbConfig, config: dict, owns_wandb: bool):
        self.run_dir = run_dir
        self.wandb_run: WandbRun | None = None
        self.wandb_config = wandb_config if owns_wandb else WandbConfig()
        self.config = config
        self.evals = Relay(run_dir, "evals")

    def start_wandb(self, run_id: str | None) -> str | None:
        """Start (or continue, given its id) the W&B run if this process owns it; its id."""
        self.wandb_run = start_wandb(
            self.wandb_config, self.run_dir, run_id, {COMPONENT: self.config}
        )
        return self.wandb_run.id if self.wandb_run else None

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self.run_dir.append_metrics(COMPONENT, step, metrics)
        if self.wandb_run is not None:
            self.wandb_run.log(COMPONENT, step, metrics)
            self.evals.forward(self.wandb_run)
        logger.info(format_line(step, metrics))

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.evals.forward(self.wandb_run)
            self.wandb_run.finish()


def format_line(step: int, metrics: dict[str, float]) -> str:
    shown = ("loss", "entropy", "mismatch_kl", "clip_frac", "mask_frac", "grad_norm", "lr")
    parts = [f"{k} {metrics[k]:.4g}" for k in shown if k in metrics]
    parts.append(f"{metrics.get('tokens_per_s', 0):.0f} tok/s")
    parts.append(f"{metrics.get('step_time_s', 0):.2f} s")
    parts.append(f"mem {metrics.get('peak_memory_gib', 0):.2f} GiB")
    return f"step {step} | " + " | ".join(parts)
