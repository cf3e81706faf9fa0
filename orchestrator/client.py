"""Talking to one inference server over HTTP, through the client its ServerPool shares
(orchestrator/servers.py).

Every wait has a timeout and names what it waited for (OrchestratorError)."""

import asyncio
import logging
from typing import Any

import httpx

from rlcore.contracts.protocol import MODELS_ROUTE, UPDATE_WEIGHTS_ROUTE
from rlcore.errors import ConfigError
from rlcore.processes.health import probe_health
from rlcore.processes.poll import wait_until_async
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV

logger = logging.getLogger("orchestrator")
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


class OrchestratorError(Exception):
    """A run-time failure with a message that says what failed and where (no traceback)."""


class AdminTokenError(OrchestratorError):
    """A weight-swap route refused the admin token (401): nothing was swapped."""


def server_root(base_url: str) -> str:
    """`http://host:port/v1` -> `http://host:port` (the admin routes live at the root)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def wait_for_server(
    http: httpx.AsyncClient,
    base_url: str,
    model: str,
    timeout_s: float,
    api_key: str = "EMPTY",
    seq_len: int = 0,
    nonce: str | None = None,
) -> None:
    """Wait until `/health` answers 200 and `model` is listed in `/v1/models`, with room for
    `seq_len` tokens per sample (its max_model_len). With `nonce` (the launcher's, in
    SERVER_NONCE_ENV) /health must prove it: another program on the port is a ForeignServer
    error at once, before anything else is sent to it (rlcore.processes.health)."""
    root = server_root(base_url)
    last = "no answer yet"

    async def listed() -> tuple[dict[str, int | None]] | None:
        nonlocal last
        problem = await asyncio.to_thread(probe_health, root, 5.0, nonce)
        if problem is not None:
            last = problem
            return None
        try:
            return (await _served_models(http, root, api_key),)
        except httpx.HTTPError as err:
            last = f"{MODELS_ROUTE}: {type(err).__name__}: {err}"
            return None

    try:
        (served,) = await wait_until_async(listed, timeout_s, 1.0, f"{root} to serve {model}")
    except TimeoutError:
        raise OrchestratorError(
            f"inference server at {root} was not ready with model {model!r} within "
            f"{timeout_s:g}s (client.health_timeout_s); last: {last}. Start it with "
            f"`inference @ infer.toml` or point --client.base-url at a running server"
        ) from None
    if model not in served:
        raise OrchestratorError(
            f"inference server at {root} serves {list(served)}, not model.name "
            f"{model!r}: set --model.name to the served name"
        )
    check_room(root, model, served[model], seq_len)


def check_room(root: str, model: str, max_model_len: int | None, seq_len: int) -> None:
    if max_model_len is not None and max_model_len < seq_len:
        raise ConfigError(
            f"inference at {root} serves {model} with max_model_len {max_model_len} but "
            f"seq_len = {seq_len}: no sample could be longer than {max_model_len} tokens; "
            f"lower --seq-len to {max_model_len} or restart inference with "
            f"--model.max-model-len {seq_len} (rl sets it from seq_len)"
        )


async def _served_models(http: httpx.AsyncClient, root: str, api_key: str) -> dict[str, int | None]:
    """Served model name -> its max_model_len (None when the server does not say)."""
    headers = {"Authorization": f"Bearer {api_key}"}
    answer = await http.get(root + MODELS_ROUTE, headers=headers, timeout=5.0)
    if answer.status_code == 401:
        raise OrchestratorError(
            f"{root}{MODELS_ROUTE} answered 401: the server requires an API key; put it in the "
            "environment variable that client.api_key_var names (default VLLM_API_KEY)"
        )
    answer.raise_for_status()
    return {m["id"]: m.get("max_model_len") for m in answer.json().get("data", [])}


def brief(request: dict[str, Any]) -> dict[str, Any]:
    """A load request for messages: long values (a collective update's tensor list) cut."""
    return {k: v if len(repr(v)) <= 200 else "..." for k, v in request.items()}


async def update_weights(
    http: httpx.AsyncClient,
    base_url: str,
    request: dict[str, Any],
    timeout_s: float,
    token: str | None = None,
) -> dict[str, Any] | None:
    """Ask inference to serve the policy `request` names (a WeightReceiver.load_request body);
    returns the server's answer (its `model`, when present, is the name requests must use: a
    LoRA adapter's), or None if the server has no such route (a plain vLLM server keeps its
    own weights). `token`: the run's admin token (rlcore.runs.admin_token)."""
    url = server_root(base_url) + UPDATE_WEIGHTS_ROUTE
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        answer = await http.post(url, json=request, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as err:
        raise OrchestratorError(
            f"POST {url} {brief(request)} failed: {type(err).__name__}: {err}"
        ) from None
    if answer.status_code in (404, 405):
        return None
    if answer.status_code == 401:
        raise AdminTokenError(
            f"POST {url} answered 401: the weight-swap routes need the server's admin token, "
            f"which inference writes to <output_dir>/admin_token: run the orchestrator with the "
            f"same output_dir as inference, or give both the same {ADMIN_TOKEN_ENV}"
        )
    if answer.status_code != 200:
        raise OrchestratorError(
            f"POST {url} {brief(request)} answered {answer.status_code}: {answer.text[:500]}"
        )
    return answer.json()
