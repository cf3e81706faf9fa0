"""In-place weight swaps for a running vLLM engine (`/update_weights`, `/reload_weights`).

A folder is checked before any weight is touched (inference/weight_dirs.py: inside the run's
own policy folder, no link out, an HF folder matching the served model). Only then is
generation paused (in-flight requests finish first), the workers reload from the folder
through vLLM's `reload_weights` RPC, the prefix cache is cleared and generation resumes.
A failed reload restores the previous weights, so the server keeps serving a whole policy. A
reload that times out is another matter: the workers may still be writing, so nothing is sent
to them again (no restore, no later swap: 503 until inference restarts).
A LoRA adapter folder (PEFT's `adapter_config.json`) is served as an adapter instead, when the
server runs with `inference.lora` (inference/lora.py).
"""

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inference.collective import CollectiveLoader
from inference.lora import AdapterSwapper, is_adapter_dir
from inference.weight_dirs import (
    WeightDirError,
    allowed_root,
    check_inside,
    check_weight_dir,
    tensor_shapes,
)
from rlcore import faults
from rlcore.config.weight_transfer import WeightLoader
from rlcore.runs.rundir import RunDir


@dataclass
class WeightState:
    base: str
    """What the server started from (a local folder or a hub name)."""

    current: str
    """The weights serving now."""


class FilesystemLoader(WeightLoader):
    """The filesystem transport's loader: swaps the engine's weights in place from a folder of
    the run's `weights/`, one swap at a time.

    Consumes: folder paths from the admin routes. Waits for: in-flight requests to finish
    (pause mode "wait") and the workers' reload RPC, each within `timeout_s`."""

    def __init__(
        self,
        engine,
        base: str,
        run_dir: RunDir,
        timeout_s: float,
        pause_mode: str,
        adapters: AdapterSwapper | None = None,
    ):
        self.engine = engine
        self.adapters = adapters
        self.run_dir = run_dir
        self.timeout_s = timeout_s
        self.pause_mode = pause_mode
        self.state = WeightState(base=base, current=base)
        base_path = Path(base)
        self.expected = tensor_shapes(base_path) if base_path.is_dir() else None
        self.lock = asyncio.Lock()
        self.unsafe: str | None = None
        """Why the served weights are unknown (a weight change timed out); None while known."""

    def check_safe(self) -> None:
        if self.unsafe is not None:
            raise WeightDirError(
                503,
                f"an earlier weight change timed out ({self.unsafe}) and the engine may still "
                "be applying it, so no weights are sent to it again: restart inference",
            )

    async def load(self, request: dict[str, Any]) -> dict[str, Any]:
        self.check_safe()
        weight_dir = request.get("weight_dir")
        if not isinstance(weight_dir, str):
            raise WeightDirError(422, f'expected a JSON body {{"weight_dir": PATH}}, got {request}')
        root = allowed_root(self.run_dir)
        path = check_inside(Path(weight_dir), root)
        if is_adapter_dir(path):
            return await self.load_adapter(path)
        folder = check_weight_dir(path, root, self.expected)
        return await self.swap(str(folder))

    async def load_adapter(self, folder: Path) -> dict[str, Any]:
        """Serve a LoRA adapter on top of the weights serving now; the answer's `model` is the
        name requests must use."""
        if self.adapters is None:
            raise WeightDirError(
                422,
                f"{folder} is a LoRA adapter but this server was started without LoRA: set "
                "inference.lora (rl sets it from trainer.lora)",
            )
        async with self.lock:
            self.check_safe()
            return await self.adapters.load(folder, self.wait_for)

    async def reload_base(self) -> dict:
        self.check_safe()
        return await self.swap(self.state.base)

    async def swap(self, target: str) -> dict:
        async with self.lock:
            self.check_safe()
            if self.adapters is not None:  # full weights replace the adapter policy
                await self.adapters.unload_current(self.wait_for)
            start = time.monotonic()
            previous = self.state.current
            try:
                await self.wait_for(
                    "pausing generation",
                    self.engine.pause_generation(mode=self.pause_mode, clear_cache=True),
                    harmless=True,
                )
                await self.reload(target, previous)
            finally:
                await self.engine.resume_generation()
            self.state.current = target
            return {"status": "ok", "weights": target, "load_s": round(time.monotonic() - start, 3)}

    async def reload(self, target: str, previous: str) -> None:
        try:
            await self.wait_for(f"reloading {target}", self.rpc_reload(target))
        except WeightDirError:
            raise  # timed out: the workers may still be writing; send them nothing more
        except Exception as err:
            # Half-written parameters would serve a mix of two policies: go back to `previous`.
            await self.wait_for(f"restoring {previous}", self.rpc_reload(previous))
            raise WeightDirError(500, f"loading {target} failed ({err}); kept {previous}") from err
        await self.engine.reset_prefix_cache()

    async def rpc_reload(self, path: str) -> None:
        await faults.delay_before_reload()
        await self.engine.collective_rpc(
            "reload_weights_retied", kwargs={"weights_path": path, "is_checkpoint_format": True}
        )

    async def wait_for(self, what: str, awaitable, harmless: bool = False) -> Any:
        """`awaitable`'s result, or a 504 WeightDirError naming `what` after `timeout_s`. A
        timeout of anything but a `harmless` wait (pausing) leaves the weights unknown."""
        try:
            return await asyncio.wait_for(awaitable, timeout=self.timeout_s)
        except TimeoutError:
            message = f"timed out after {self.timeout_s:g} s {what} (weights.timeout_s)"
            if not harmless:
                self.unsafe = message
            raise WeightDirError(504, message) from None


TRANSPORTS = {"filesystem": FilesystemLoader, "collective": CollectiveLoader}


def build_loader(config, engine, base: str, output_dir: Path, weights, adapters=None):
    """The loader of the configured transport (`config`: WeightTransferConfig, `weights`: the
    inference WeightsConfig with the swap's timeout and pause mode, `adapters`: the LoRA
    AdapterSwapper when serving LoRA). Policies load only from the run's own `weights/`."""
    return TRANSPORTS[config.type](
        engine, base, RunDir(output_dir), weights.timeout_s, weights.pause_mode, adapters
    )
