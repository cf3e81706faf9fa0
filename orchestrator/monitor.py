"""What the orchestrator reports: the console/log line per step, metrics.jsonl, W&B, and a
few readable samples per step."""

import json
import logging
from typing import Any

from orchestrator.config import OrchestratorConfig
from orchestrator.envs import Rollout
from rlcore.processes.poll import wait_until
from rlcore.reporting.wandb_run import Relay, start_wandb
from rlcore.runs import waits
from rlcore.runs.rundir import RunDir

logger = logging.getLogger("orchestrator")
COMPONENT = "orchestrator"
SAMPLES_FILE = "samples.jsonl"
RELAY_POLL_S = 1.0


class Monitor:
    """metrics.jsonl always; the run's one W&B run when `wandb.project` is set, into which it
    also relays the trainer's records and those of `evals --watch` (rlcore.reporting.wandb_run)."""

    def __init__(self, config: OrchestratorConfig, run_dir: RunDir, wandb_run_id: str | None):
        self.run_dir = run_dir
        self.wandb = start_wandb(
            config.wandb, run_dir, wandb_run_id, {"orchestrator": config.model_dump(mode="json")}
        )
        self.wandb_run_id = self.wandb.id if self.wandb else wandb_run_id
        self.trainer = Relay(run_dir, "trainer")
        self.evals = Relay(run_dir, "evals")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run_dir.append_metrics(COMPONENT, step, metrics)
        if self.wandb is not None:
            self.wandb.log(COMPONENT, step, metrics)
            self.trainer.forward(self.wandb)
            self.evals.forward(self.wandb)

    def close(self, final_trainer_step: int | None = None, timeout_s: float = 0.0) -> None:
        """Relay the trainer's records up to `final_trainer_step` (waiting up to `timeout_s`
        for it, when a trainer has been seen at all), then finish the W&B run."""
        wandb = self.wandb
        if wandb is None:
            return
        what = f"the trainer's records up to step {final_trainer_step}"

        def relayed() -> bool:
            self.trainer.forward(wandb)
            last = self.trainer.last_step
            return last is None or final_trainer_step is None or last >= final_trainer_step

        with waits.waiting(what, "trainer"):
            try:
                wait_until(relayed, timeout_s, RELAY_POLL_S, what)
            except TimeoutError:
                logger.warning(
                    f"W&B: the trainer's records after step {self.trainer.last_step} "
                    "were not relayed"
                )
        self.evals.forward(wandb)
        wandb.finish()


def samples_jsonl(rollouts: list[Rollout], num: int) -> str:
    """The first `num` rollouts as JSON lines: prompt, completion, reward, metrics."""
    lines = []
    for rollout in rollouts[:num]:
        record = {
            "example_id": rollout.example_id,
            "prompt": rollout.prompt,
            "completion": rollout.completion,
            "reward": rollout.reward,
            "metrics": rollout.metrics,
            "is_truncated": rollout.is_truncated,
            "error": rollout.error,
        }
        lines.append(json.dumps(record, default=_jsonable) + "\n")
    return "".join(lines)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(exclude_none=True)
    return str(value)
