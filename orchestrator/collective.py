"""The collective transport's orchestrator side (rlcore.contracts.collective): sees the policies the
trainer offers, asks it to send one and has every inference server receive it.

Consumes: `transfer/offer.json`. Produces: `transfer/request.json`, `transfer/done` at the end,
POST /update_weights bodies (one per server: its first rank in the group). Waits for: the
trainer's offer, up to a timeout.
"""

from dataclasses import dataclass, field
from typing import Any

from orchestrator.client import OrchestratorError
from rlcore.config.weight_transfer import PolicyServers, WeightReceiver
from rlcore.contracts import collective
from rlcore.processes.poll import wait_until_async
from rlcore.runs.attempt import AttemptFilter
from rlcore.runs.rundir import RunDir

POLL_S = 0.2


@dataclass
class CollectiveReceiver(WeightReceiver):
    """Policies the trainer offers in `transfer/offer.json` (rlcore.contracts.collective): one at a
    time, the trainer waiting until it is asked for it, so each is served as soon as it appears."""

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
        def offered() -> tuple[int] | None:
            offer = self.current_offer()
            if offer is not None and oldest <= offer["step"] <= newest:
                self.offer = offer
                return (offer["step"],)
            return None

        try:
            (step,) = await wait_until_async(offered, timeout_s, POLL_S, "the trainer's offer")
        except TimeoutError:
            raise OrchestratorError(
                f"the trainer offered no policy step {oldest}..{newest} in "
                f"{self.run_dir.transfer / collective.OFFER} within {timeout_s:g}s "
                f"(weights_timeout_s): is it running with output_dir {self.run_dir.root}?"
            ) from None
        return step

    def load_request(self, step: int) -> dict[str, Any]:
        """Also asks the trainer to send `step` (it sends while inference receives)."""
        offer = self.offer if self.offer and self.offer["step"] == step else self.current_offer()
        if offer is None or offer["step"] != step:
            raise OrchestratorError(f"policy step {step} is not on offer by the trainer")
        collective.write_request(self.run_dir.transfer, step, offer["group"]["id"])
        return {key: offer[key] for key in ("step", "group", "update_info")}

    async def swap(self, step: int, servers: PolicyServers) -> dict[str, Any] | None:
        """Asks the trainer for `step` and has every server receive it, waiting for their
        answers as long as the group's timeout (which grows with the policy) lets them take."""
        request = self.load_request(step)
        return await servers.update_weights(
            self.server_requests(request, len(servers)), collective.answer_timeout_s(request)
        )

    def server_requests(self, request: dict[str, Any], count: int) -> list[dict[str, Any]]:
        """`request` as each of `count` servers gets it: each joins the group at its own
        first rank, its workers after the trainer (rank 0) and the servers before it."""
        workers = request["group"]["world_size"] - 1
        if workers % count:
            raise OrchestratorError(
                f"weight_transfer.inference_workers = {workers} cannot be split evenly over "
                f"{count} inference servers: set it to the servers' workers together"
            )
        return [request | {"rank_offset": 1 + i * (workers // count)} for i in range(count)]

    def close(self) -> None:
        seen = self.offer or self.current_offer()
        collective.mark_done(self.run_dir.transfer, seen["group"]["id"] if seen else None)
