"""The orchestrator's side of the weight-transfer seam (rlcore.config.weight_transfer): which
policies the trainer has published, and the swap that makes every inference server serve one. The
filesystem transport's receiver, and the registry of every transport's.

Consumes: `weights/step_<n>/STABLE` (filesystem transport). Waits for: the trainer, up to a
timeout. Produces: POST /update_weights bodies.
"""

from dataclasses import dataclass, field
from typing import Any

from orchestrator.client import OrchestratorError
from orchestrator.collective import CollectiveReceiver
from rlcore.config.base import WeightTransferConfig
from rlcore.config.weight_transfer import WeightReceiver
from rlcore.processes.poll import wait_until_async
from rlcore.runs.attempt import AttemptFilter
from rlcore.runs.rundir import STABLE, RunDir

POLL_S = 0.2


@dataclass
class FilesystemReceiver(WeightReceiver):
    """`weights/step_<m>/` folders marked STABLE by this attempt's trainer."""

    run_dir: RunDir
    trusted_upto: int = 0
    """Weight folders up to this step (the resume point) are valid whoever published them;
    a newer one counts only if this attempt's trainer marked it (rlcore.runs.attempt): a newer one
    from an earlier attempt belongs to a run that was abandoned."""
    attempts: AttemptFilter = field(default_factory=AttemptFilter)

    def ready(self, step: int) -> bool:
        if not self.run_dir.weights_stable(step):
            return False
        return step <= self.trusted_upto or self.attempts.current(self.run_dir.weights_stamp(step))

    async def wait(self, oldest: int, newest: int, timeout_s: float) -> int:
        def newest_ready() -> tuple[int] | None:
            ready = [m for m in range(newest, oldest - 1, -1) if self.ready(m)]
            return (ready[0],) if ready else None

        try:
            (step,) = await wait_until_async(newest_ready, timeout_s, POLL_S, "a policy")
        except TimeoutError:
            raise OrchestratorError(
                f"weights {self.run_dir.weight_dir(oldest) / STABLE} did not appear within "
                f"{timeout_s:g}s (weights_timeout_s): is the trainer running with "
                f"output_dir {self.run_dir.root}?"
            ) from None
        return step

    def load_request(self, step: int) -> dict[str, Any]:
        return {"weight_dir": str(self.run_dir.weight_dir(step).resolve())}


TRANSPORTS = {"filesystem": FilesystemReceiver, "collective": CollectiveReceiver}


def build_receiver(
    config: WeightTransferConfig, run_dir: RunDir, trusted_upto: int
) -> WeightReceiver:
    return TRANSPORTS[config.type](run_dir, trusted_upto)
