"""The orchestrator's part of `checkpoints/step_<n>/`: the state after writing batches
0 .. n-1, from which batch n is generated (sampling position, counters, W&B run id).

In a deterministic run with async_level a > 0, batches n .. n+a-1 come from policies older than
n, which a resumed trainer no longer has: the part is then written after batch n+a-1 and holds
copies of those batches (`rollouts/step_<m>/`), which a resume puts back, so the resumed run
generates batch n+a with policy n exactly as the uninterrupted one did."""

import json
import shutil
from dataclasses import asdict, dataclass, field

from orchestrator.sampler import SamplerState
from rlcore.contracts.protocol import Batch, write_batch
from rlcore.files.atomic import atomic_write_text
from rlcore.runs.rundir import RunDir, is_checkpoint_step, step_name

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


def save(run_dir: RunDir, state: OrchestratorState, step: int | None = None) -> bool:
    """Write the state into checkpoint `step` (default: state.step) and its DONE marker; True
    when the whole checkpoint is now complete."""
    step = state.step if step is None else step
    folder = run_dir.part_dir(step, PART)
    atomic_write_text(folder / STATE_FILE, json.dumps(asdict(state), indent=2) + "\n")
    return run_dir.mark_part_done(step, PART)


def load(run_dir: RunDir, step: int) -> OrchestratorState:
    path = run_dir.part_dir(step, PART) / STATE_FILE
    raw = json.loads(path.read_text())
    raw["sampler"] = SamplerState(**raw["sampler"])
    return OrchestratorState(**raw)


@dataclass
class CheckpointPlan:
    """When the orchestrator writes its part of each checkpoint."""

    interval: int | None
    max_steps: int
    enabled: bool
    lead: int = 0
    """Batches after a checkpoint that its part carries: async_level in a deterministic run."""

    def lead_of(self, step: int) -> int:
        return min(self.lead, self.max_steps - step)

    def is_checkpoint(self, step: int) -> bool:
        return step > 0 and is_checkpoint_step(step, self.interval, self.max_steps, self.enabled)

    def carriers(self, batch: int) -> list[int]:
        """The checkpoints whose part carries batch `batch`."""
        return [
            k
            for k in range(max(1, batch - self.lead + 1), batch + 1)
            if self.is_checkpoint(k) and batch < k + self.lead_of(k)
        ]

    def due(self, num_batches: int) -> list[int]:
        """The checkpoints whose part is complete once `num_batches` batches are written."""
        return [
            k
            for k in range(max(1, num_batches - self.lead), num_batches + 1)
            if self.is_checkpoint(k) and k + self.lead_of(k) == num_batches
        ]


def keep_batch(run_dir: RunDir, plan: CheckpointPlan, batch: Batch, extra: dict[str, str]) -> None:
    """Copy batch `batch.step` into every checkpoint part that carries it (before the trainer
    may consume and delete it)."""
    for k in plan.carriers(batch.step):
        write_batch(batch, run_dir.part_dir(k, PART) / "rollouts" / step_name(batch.step), extra)


def restore_batches(run_dir: RunDir, step: int) -> list[int]:
    """Put the batches checkpoint `step` carries back into `rollouts/`; their steps."""
    kept = run_dir.part_dir(step, PART) / "rollouts"
    restored = []
    for folder in sorted(kept.iterdir()) if kept.is_dir() else []:
        target = run_dir.rollouts / folder.name
        tmp = run_dir.rollouts / f".{folder.name}.restore"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(folder, tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        restored.append(int(folder.name.removeprefix("step_")))
    return restored
