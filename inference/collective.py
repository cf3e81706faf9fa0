"""The collective transport's loader behind `/update_weights` (rlcore.contracts.collective): the
request names the trainer's group, this server's first rank in it and the update's tensors; the
workers receive them through vLLM's weight-transfer engine (`gloo`, or vLLM's `nccl`).

Consumes: {step, group, rank_offset, update_info} bodies from the orchestrator. Waits for:
in-flight requests (pause mode), joining the group and the update, each within the group's
`timeout_s` (the last two recorded as a wait on the trainer for `rl`, rlcore.runs.waits). A failed
or timed-out receive leaves the model half-written and the trainer's copy gone, so the server
refuses further swaps (503) and the run stops (or restarts) with it.
"""

import asyncio
import logging
import time
from typing import Any

from inference.weight_dirs import WeightDirError
from rlcore.config.weight_transfer import WeightLoader
from rlcore.contracts.collective import reach_group, worker_init_info
from rlcore.runs import waits
from rlcore.runs.rundir import RunDir

logger = logging.getLogger("inference")
FIELDS = ("step", "group", "rank_offset", "update_info")


class CollectiveLoader(WeightLoader):
    def __init__(
        self,
        engine,
        base: str,
        run_dir: RunDir,
        timeout_s: float,
        pause_mode: str,
        adapters=None,
    ):
        self.engine = engine
        self.base = base
        self.pause_mode = pause_mode
        self.pause_timeout_s = timeout_s
        self.group_id: str | None = None
        """The group this server's workers joined (a trainer restart makes a new one)."""
        self.current = base
        self.lock = asyncio.Lock()
        self.unsafe: str | None = None

    async def load(self, request: dict[str, Any]) -> dict[str, Any]:
        missing = [key for key in FIELDS if key not in request]
        if missing:
            raise WeightDirError(
                422, f"a collective update needs {', '.join(FIELDS)}; missing {missing}"
            )
        async with self.lock:
            if self.unsafe is not None:
                raise WeightDirError(
                    503, f"{self.unsafe}; no update is received again: restart inference"
                )
            start = time.monotonic()
            try:
                await self.wait_for(
                    "pausing generation",
                    self.engine.pause_generation(mode=self.pause_mode, clear_cache=True),
                    self.pause_timeout_s,
                )
                phases = {"pause": time.monotonic() - start}
                phases |= await self.receive(request)
            finally:
                await self.engine.resume_generation()
            self.current = f"step_{request['step']}"
            return {
                "status": "ok",
                "weights": self.current,
                "load_s": round(time.monotonic() - start, 3),
                "phases_s": {k: round(v, 3) for k, v in phases.items()},
            }

    async def receive(self, request: dict[str, Any]) -> dict[str, float]:
        """Join the trainer's group if new, then take the update; seconds per phase."""
        group, timeout_s = request["group"], float(request["group"]["timeout_s"])
        transfer = self.engine.vllm_config.weight_transfer_config
        ours = transfer.backend if transfer is not None else None
        if group["backend"] != ours:
            raise WeightDirError(
                422,
                f"the trainer sends over {group['backend']} but this server "
                f"receives over {ours}: set the same weight_transfer.backend on both",
            )
        try:
            clock = [time.monotonic()]
            with waits.waiting(f"policy step {request['step']}", "trainer"):
                if group["id"] != self.group_id:
                    await self.join(group, request["rank_offset"], timeout_s)
                await self.wait_for("starting the update", self.engine.start_weight_update(), 60)
                clock.append(time.monotonic())
                update = {"update_info": request["update_info"]}
                await self.wait_for(
                    f"receiving policy step {request['step']} from the trainer",
                    self.engine.collective_rpc("update_weights", kwargs=update),
                    timeout_s,
                )
            clock.append(time.monotonic())
            await self.wait_for(
                "finishing the update", self.engine.finish_weight_update(), timeout_s
            )
            clock.append(time.monotonic())
        except WeightDirError as err:
            self.unsafe = str(err)
            raise
        except Exception as err:
            self.unsafe = f"receiving policy step {request['step']} failed ({err})"
            raise WeightDirError(500, f"{self.unsafe}: is the trainer still running?") from err
        await self.engine.reset_prefix_cache()
        spans = [b - a for a, b in zip(clock, clock[1:], strict=False)]
        return dict(zip(("start", "receive", "finish"), spans, strict=True))

    async def join(self, group: dict[str, Any], rank_offset: int, timeout_s: float) -> None:
        if self.group_id is not None:
            await self.engine.collective_rpc("shutdown_weight_transfer_engine")
            self.group_id = None
        try:
            await asyncio.to_thread(reach_group, group["host"], group["port"], timeout_s)
        except ConnectionError as err:
            raise WeightDirError(502, str(err)) from None
        info = worker_init_info(group, rank_offset)
        logger.info(
            f"joining the trainer's {group['backend']} group {group['id']} at "
            f"{group['host']}:{group['port']} from rank {rank_offset}"
        )
        await self.wait_for(
            f"joining the trainer's group at {group['host']}:{group['port']}",
            self.engine.collective_rpc("init_weight_transfer_engine", kwargs={"init_info": info}),
            timeout_s,
        )
        self.group_id = group["id"]

    async def reload_base(self) -> dict[str, Any]:
        raise WeightDirError(
            422,
            "the collective transport cannot go back to the base weights: the trainer "
            "holds the only copy of each policy",
        )

    async def wait_for(self, what: str, awaitable, timeout_s: float) -> Any:
        try:
            return await asyncio.wait_for(awaitable, timeout=timeout_s)
        except TimeoutError:
            raise WeightDirError(504, f"timed out after {timeout_s:g} s {what}") from None
