"""Serving LoRA adapters published by a `[trainer.lora]` run (`inference.lora` set: vLLM runs with
`--enable-lora`).

An adapter folder (`adapter_config.json` + `adapter_model.safetensors`, PEFT's layout) is loaded
at run time through vLLM's own model registry, so requests reach it by its served name (the
folder's name, e.g. `step_12`) as `model`; the previous adapter is then unloaded once the
requests in flight on it have finished (`weights.pause_mode`). Our `/update_weights` route does
this, guarded like every admin route, so vLLM's development-only `/v1/load_lora_adapter`
(VLLM_ALLOW_RUNTIME_LORA_UPDATING) stays off.
"""

import json
import time
from pathlib import Path
from typing import Any

from inference.config import InferenceConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def is_adapter_dir(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file()


def check_adapter_dir(folder: Path, max_rank: int) -> None:
    """A readable PEFT LoRA folder whose rank the server can take; else a WeightDirError
    (nothing is loaded)."""
    from inference.weight_dirs import WeightDirError, tensor_shapes

    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as err:
        raise WeightDirError(422, f"{folder} has no valid {ADAPTER_CONFIG}: {err}") from None
    if config.get("peft_type", "LORA") != "LORA" or not isinstance(config.get("r"), int):
        raise WeightDirError(422, f"{folder / ADAPTER_CONFIG} is not a LoRA adapter config")
    if config["r"] > max_rank:
        raise WeightDirError(
            422,
            f"{folder} holds a rank-{config['r']} adapter but the server takes rank <= "
            f"{max_rank}: raise inference.lora.max_rank",
        )
    if not (folder / ADAPTER_WEIGHTS).is_file() or not tensor_shapes(folder):
        raise WeightDirError(422, f"{folder} has no {ADAPTER_WEIGHTS}")


class AdapterSwapper:
    """One LoRA adapter serving at a time, swapped in through vLLM's serving-models registry.

    Consumes: adapter folders from `/update_weights`. Waits for: vLLM loading the adapter, then
    in-flight requests on the previous one (pause mode), each within `timeout_s`."""

    def __init__(self, engine, app_state, max_rank: int, pause_mode: str, timeout_s: float):
        self.engine = engine
        self.app_state = app_state  # vLLM fills `openai_serving_models` in after we are built
        self.max_rank = max_rank
        self.pause_mode = pause_mode
        self.timeout_s = timeout_s
        self.current: str | None = None

    async def load(self, folder: Path, wait_for) -> dict[str, Any]:
        """Serve the adapter in `folder` under the folder's name; the previous one goes."""
        from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

        from inference.weight_dirs import WeightDirError

        check_adapter_dir(folder, self.max_rank)
        start, name = time.monotonic(), folder.name
        models = self.app_state.openai_serving_models
        request = LoadLoRAAdapterRequest(
            lora_name=name, lora_path=str(folder), load_inplace=name in models.lora_requests
        )
        answer = await wait_for(f"loading adapter {folder}", models.load_lora_adapter(request))
        if not isinstance(answer, str):  # vLLM's ErrorResponse
            raise WeightDirError(422, f"vLLM refused adapter {folder}: {answer.error.message}")
        previous, self.current = self.current, name
        if previous is not None and previous != name:
            await self.unload(previous, wait_for)
        return {
            "status": "ok",
            "weights": str(folder),
            "model": name,
            "load_s": round(time.monotonic() - start, 3),
        }

    async def unload_current(self, wait_for) -> None:
        if self.current is not None:
            await self.unload(self.current, wait_for)
            self.current = None

    async def unload(self, name: str, wait_for) -> None:
        """Drop adapter `name` from the registry and the engine once its requests finished."""
        from vllm.entrypoints.serve.lora.protocol import UnloadLoRAAdapterRequest

        models = self.app_state.openai_serving_models
        lora = models.lora_requests.get(name)
        if lora is None:
            return
        pause = self.engine.pause_generation(mode=self.pause_mode, clear_cache=False)
        await wait_for(f"pausing generation to unload adapter {name}", pause, harmless=True)
        try:
            await models.unload_lora_adapter(UnloadLoRAAdapterRequest(lora_name=name))
            await self.engine.remove_lora(lora.lora_int_id)
        finally:
            await self.engine.resume_generation()


def build_adapter_swapper(config: InferenceConfig, engine, app_state) -> AdapterSwapper | None:
    """The LoRA side of the loader when `inference.lora` is set, else None."""
    if config.lora is None:
        return None
    weights = config.weights
    return AdapterSwapper(
        engine, app_state, config.lora.max_rank, weights.pause_mode, weights.timeout_s
    )
