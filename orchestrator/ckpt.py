"""The orchestrator's part of `checkpoints/step_<n>/`: the state after writing batches
0 .. n-1, from which batch n is generated (sampling position, counters, W&B run id)."""

import json
from dataclasses import asdict, dataclass, field

from orchestrator.sampler import SamplerState
from rlcore.files import atomic_write_text
from rlcore.rundir import RunDir

PART = "orchestrator"
STATE_FILE = "state.json"


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


def save(run_dir: RunDir, state: OrchestratorState) -> bool:
    """Write the state and its DONE marker; True when the whole checkpoint is now complete."""
    folder = run_dir.part_dir(state.step, PART)
    atomic_write_text(folder / STATE_FILE, json.dumps(asdict(state), indent=2) + "\n")
    return run_dir.mark_part_done(state.step, PART)


def load(run_dir: RunDir, step: int) -> OrchestratorState:
    path = run_dir.part_dir(step, PART) / STATE_FILE
    raw = json.loads(path.read_text())
    raw["sampler"] = SamplerState(**raw["sampler"])
    return OrchestratorState(**raw)
