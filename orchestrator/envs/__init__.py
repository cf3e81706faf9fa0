"""Environments by `type`: the adapters the orchestrator can load (see base.py)."""

import logging
from collections.abc import Callable

from orchestrator.envs.base import EnvAdapter, Rollout, Turn
from orchestrator.envs.classic import VerifiersEnv
from orchestrator.envs.v1 import V1Env, is_v1_module
from rlcore.secrets import resolve

ENV_TYPES: dict[str, Callable[[str, dict], EnvAdapter]] = {"verifiers": VerifiersEnv, "v1": V1Env}
"""`[[env]] type` -> the adapter's builder, called with the table's `id` and `args`."""

logger = logging.getLogger("orchestrator")

__all__ = ["ENV_TYPES", "EnvAdapter", "Rollout", "Turn", "load_env", "sampling_args"]


def load_env(config) -> EnvAdapter:
    """The adapter for one `[[env]]` or `[[eval.env]]` table; a `verifiers` id whose package is
    a v1 taskset (no `load_environment`) loads as `v1`."""
    env_type = config.type
    if env_type == "verifiers" and is_v1_module(config.id):
        logger.info(f"environment {config.id!r} is a verifiers v1 taskset: loading it as type v1")
        env_type = "v1"
    args = resolve(config.args, f"[[env]] {config.id!r} args")  # $VAR secrets, here only
    return ENV_TYPES[env_type](config.id, args)


def sampling_args(sampling) -> dict:
    """Request arguments for `sampling` (a SamplingConfig), every parameter explicit, asking vLLM
    for token ids and per-token logprobs."""
    return {
        "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "logprobs": True,
        "extra_body": {
            "return_token_ids": True,
            "top_k": sampling.top_k,
            "min_p": sampling.min_p,
            "repetition_penalty": sampling.repetition_penalty,
        },
    }
