"""What the orchestrator reports: the console/log line per step, metrics.jsonl, W&B, and a
few readable samples per step."""

import json
import logging
import os
from pathlib import Path
from typing import Any

from orchestrator.config import OrchestratorConfig
from orchestrator.envs import Rollout
from rlcore.rundir import RunDir

logger = logging.getLogger("orchestrator")
COMPONENT = "orchestrator"
SAMPLES_FILE = "samples.jsonl"


def load_dotenv(path: Path = Path(".env")) -> None:
    """Read KEY=VALUE lines from `.env` into the environment (never overriding, never logged)."""
    if not path.is_file():
        return
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.removeprefix("export ").split("=", 1)
        os.environ.setdefault(key.strip(), value.strip().strip("'\""))


class Monitor:
    """metrics.jsonl always; W&B when `wandb.project` is set (offline without an API key)."""

    def __init__(self, config: OrchestratorConfig, run_dir: RunDir, wandb_run_id: str | None):
        self.run_dir = run_dir
        self.wandb = None
        self.wandb_run_id = wandb_run_id
        if config.wandb.project is not None:
            self._init_wandb(config, wandb_run_id)

    def _init_wandb(self, config: OrchestratorConfig, run_id: str | None) -> None:
        load_dotenv()
        import wandb

        offline = config.wandb.offline
        if offline is None:
            offline = not os.environ.get("WANDB_API_KEY")
        run = wandb.init(
            project=config.wandb.project,
            entity=config.wandb.entity,
            name=config.wandb.name and f"{config.wandb.name}-orchestrator",
            tags=config.wandb.tags,
            id=run_id,
            resume="allow" if run_id else None,
            dir=str(self.run_dir.root),
            mode="offline" if offline else "online",
            config=config.model_dump(mode="json"),
        )
        self.wandb = run
        self.wandb_run_id = run.id

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self.run_dir.append_metrics(COMPONENT, step, metrics)
        if self.wandb is not None:
            self.wandb.log({**metrics, "step": step})

    def close(self) -> None:
        if self.wandb is not None:
            self.wandb.finish()


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
