"""The orchestrator's part of `checkpoints/step_<n>/`: the state after writing batches
0 .. n-1, from which batch n is generated (sampling position, counters, W&B run id)."""

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from orchestrator.sampler import SamplerState
from rlcore.rundir import RunDir, atomic_write_text

PART = "orchestrator"
PARTS = ("trainer", "orchestrator")
STATE_FILE = "state.json"
DONE = "DONE"


@dataclass
class OrchestratorState:
    step: int = 0
    """Batches written so far (= the next batch to generate)."""

    sampler: SamplerState = field(default_factory=SamplerState)
    env_ids: list[str] = field(default_factory=list)
    num_rollouts: int = 0
    num_samples: int = 0
    num_tokens: int = 0
    wandb_run_id: str | None = None


def should_save(step: int, interval: int | None, max_steps: int, enabled: bool) -> bool:
    """Same rule as the trainer: every `interval` steps and after the last step."""
    if not enabled:
        return False
    return step == max_steps or (interval is not None and step % interval == 0)


def part_dir(run_dir: RunDir, step: int) -> Path:
    return run_dir.checkpoint_dir(step) / PART


def save(run_dir: RunDir, state: OrchestratorState) -> bool:
    """Write the state and its DONE marker; True when the whole checkpoint is now complete."""
    folder = part_dir(run_dir, state.step)
    atomic_write_text(folder / STATE_FILE, json.dumps(asdict(state), indent=2) + "\n")
    atomic_write_text(folder / DONE, "")
    return run_dir.write_manifest_if_complete(state.step, PARTS)


def load(run_dir: RunDir, step: int) -> OrchestratorState:
    path = part_dir(run_dir, step) / STATE_FILE
    raw = json.loads(path.read_text())
    raw["sampler"] = SamplerState(**raw["sampler"])
    return OrchestratorState(**raw)
