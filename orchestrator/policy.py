"""Which policy inference serves, and when it changes.

For batch n the servers must serve a policy no older than n - async_level (exactly that one in
a deterministic run): the policy waits for the trainer through the transport's receiver and has
the receiver swap every server to it (rlcore.config.weight_transfer). An eval serves exactly the
policy it is logged under.

Consumes: the receiver's ready policies. Waits for: the trainer (recorded for rl,
rlcore.runs.waits), up to `weights_timeout_s`. Produces: swaps on every inference server.
"""

import logging
import time

from orchestrator.config import OrchestratorConfig
from rlcore.config.weight_transfer import PolicyServers, WeightReceiver
from rlcore.runs import waits

logger = logging.getLogger("orchestrator")


class Policy:
    def __init__(
        self,
        config: OrchestratorConfig,
        receiver: WeightReceiver,
        servers: PolicyServers,
        step: int | None,
    ):
        """`step`: the policy inference serves now (None: unknown, after a resume)."""
        self.config, self.receiver, self.servers = config, receiver, servers
        self.step = step
        self.can_update = True
        """False once the servers turned out to have no swap route (plain vLLM servers)."""
        self.model: str | None = None
        """The name requests use when inference serves the policy under its own name (a LoRA
        adapter); None: `model.name`."""

    @property
    def served_model(self) -> str:
        """The model name generation requests ask for."""
        return self.model or self.config.model.name

    async def ensure(self, step: int) -> float:
        """Make inference serve a policy no older than step - async_level (the newest ready one
        when it must change; exactly that one in a deterministic run); seconds spent waiting
        and loading."""
        oldest = max(0, step - self.config.async_level)
        start = time.monotonic()
        if self.config.deterministic:  # exactly policy step - async_level, never a newer one
            if self.step != oldest and self.can_update:
                await self.serve(await self.wait(oldest, oldest))
            return time.monotonic() - start
        if self.step is not None and (self.step >= oldest or not self.can_update):
            eager = self.can_update and self.receiver.eager
            newer = self.receiver.newest() if eager else None
            if newer is None or newer <= self.step:
                return 0.0
            await self.serve(newer)  # its trainer waits until it is taken
            return time.monotonic() - start
        await self.serve(await self.wait(oldest, step))
        return time.monotonic() - start

    async def ensure_exactly(self, step: int) -> None:
        """Serve exactly policy `step` (evals), waiting for the trainer to make it ready."""
        if self.step != step and self.can_update:
            await self.serve(await self.wait(step, step))

    async def wait(self, oldest: int, newest: int) -> int:
        """The newest policy step in oldest..newest the trainer has made ready (rl sees the
        wait)."""
        what = f"policy step {oldest}" if oldest == newest else f"policy step {oldest}..{newest}"
        with waits.waiting(what, "trainer"):
            return await self.receiver.wait(oldest, newest, self.config.weights_timeout_s)

    async def serve(self, step: int) -> None:
        """Have every inference server serve policy `step` (a ready one)."""
        answer = await self.receiver.swap(step, self.servers)
        if answer is None:
            logger.warning(
                "inference has no /update_weights route (a plain vLLM server?): generation "
                "keeps the weights it was started with, so training is no longer on-policy"
            )
            self.can_update = False
        self.step, self.model = step, (answer or {}).get("model")
        logger.debug(f"inference serves policy step {step} as {self.served_model}")

    def close(self) -> None:
        """No more policies are asked for (a trainer waiting to be asked goes on)."""
        self.receiver.close()
