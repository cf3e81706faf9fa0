"""The orchestrator's side of the weight-transfer seam (rlcore.weight_transfer): which policies
the trainer has published, and the request that makes inference load one.

Consumes: `weights/step_<n>/STABLE` (filesystem transport). Waits for: the trainer, up to a
timeout. Produces: POST /update_weights bodies.
"""

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from orchestrator.client import OrchestratorError
from rlcore import collective
from rlcore.attempt import AttemptFilter
from rlcore.config import WeightTransferConfig
from rlcore.rundir import STABLE, RunDir
from rlcore.weight_transfer import WeightReceiver

POLL_S = 0.2


@dataclass
class FilesystemReceiver(WeightReceiver):
    """`weights/step_<m>/` folders marked STABLE by this attempt's trainer."""

    run_dir: RunDir
    trusted_upto: int = 0
    """Weight folders up to this step (the resume point) are valid whoever published them;
    a newer one counts only if this attempt's trainer marked it (rlcore.attempt): a newer one
    from an earlier attempt belongs to a run that was abandoned."""
    attempts: AttemptFilter = field(default_factory=AttemptFilter)

    def ready(self, step: int) -> bool:
        if not self.run_dir.weights_stable(step):
            return False
        return step <= self.trusted_upto or self.attempts.current(self.run_dir.weights_stamp(step))

    async def wait(self, oldest: int, newest: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            ready = [m for m in range(newest, oldest - 1, -1) if self.ready(m)]
            if ready:
                return ready[0]
            if time.monotonic() >= deadline:
                raise OrchestratorError(
                    f"weights {self.run_dir.weight_dir(oldest) / STABLE} did not appear within "
                    f"{timeout_s:g}s (weights_timeout_s): is the trainer running with "
                    f"output_dir {self.run_dir.root}?"
                )
            await asyncio.sleep(POLL_S)

    def load_request(self, step: int) -> dict[str, Any]:
        return {"weight_dir": str(self.run_dir.weight_dir(step).resolve())}


@dataclass
class CollectiveReceiver(WeightReceiver):
    """Policies the trainer offers in `transfer/offer.json` (rlcore.collective): one at a time,
    the trainer waiting until it is asked for it, so each is served as soon as it appears."""

    run_dir: RunDir
    trusted_upto: int = 0
    attempts: AttemptFilter = field(default_factory=AttemptFilter)
    offer: dict[str, Any] | None = None
    eager = True

    def current_offer(self) -> dict[str, Any] | None:
        """This attempt's trainer's offer (an earlier attempt's is stale, whenever written)."""
        offer = collective.read_offer(self.run_dir.transfer)
        if offer is None or not self.attempts.current(offer.get("stamp")):
            return None
        return offer

    def newest(self) -> int | None:
        offer = self.current_offer()
        return None if offer is None else offer["step"]

    async def wait(self, oldest: int, newest: int, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while True:
            offer = self.current_offer()
            if offer is not None and oldest <= offer["step"] <= newest:
                self.offer = offer
                return offer["step"]
            if time.monotonic() >= deadline:
                raise OrchestratorError(
                    f"the trainer offered no policy step {oldest}..{newest} in "
                    f"{self.run_dir.transfer / collective.OFFER} within {timeout_s:g}s "
                    f"(weights_timeout_s): is it running with output_dir {self.run_dir.root}?"
                )
            await asyncio.sleep(POLL_S)

    def load_request(self, step: int) -> dict[str, Any]:
        """Also asks the trainer to send `step` (it sends while inference receives)."""
        offer = self.offer if self.offer and self.offer["step"] == step else self.current_offer()
        if offer is None or offer["step"] != step:
            raise OrchestratorError(f"policy step {step} is not on offer by the trainer")
        collective.write_request(self.run_dir.transfer, step, offer["group"]["id"])
        return {key: offer[key] for key in ("step", "group", "update_info")}

    def server_request(self, request: dict[str, Any], index: int, count: int) -> dict[str, Any]:
        workers = request["group"]["world_size"] - 1
        if workers % count:
            raise OrchestratorError(
                f"weight_transfer.inference_workers = {workers} cannot be split evenly over "
                f"{count} inference servers: set it to the servers' workers together"
            )
        return request | {"rank_offset": 1 + index * (workers // count)}

    def close(self) -> None:
        seen = self.offer or self.current_offer()
        collective.mark_done(self.run_dir.transfer, seen["group"]["id"] if seen else None)


TRANSPORTS = {"filesystem": FilesystemReceiver, "collective": CollectiveReceiver}


def build_receiver(
    config: WeightTransferConfig, run_dir: RunDir, trusted_upto: int
) -> WeightReceiver:
    return TRANSPORTS[config.type](run_dir, trusted_upto)
