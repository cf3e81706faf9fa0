"""Environments by `type`: the adapters the orchestrator can load (see base.py)."""

import asyncio
import logging
from typing import Any

from orchestrator.envs.base import EnvAdapter, Rollout, Turn
from orchestrator.envs.classic import VerifiersEnv
from orchestrator.envs.v1 import V1Env, is_v1_module
from orchestrator.servers import ServerPool
from rlcore.secrets import resolve

ENV_TYPES: dict[str, type[EnvAdapter]] = {"verifiers": VerifiersEnv, "v1": V1Env}

logger = logging.getLogger("orchestrator")

__all__ = ["ENV_TYPES", "EnvAdapter", "Rollout", "Turn", "check_envs", "load_env"]


def check_envs(envs: list, where: str) -> None:
    """Check every `[[env]]`-like config (`type`, `id`) before anything starts."""
    for env_type in dict.fromkeys(e.type for e in envs):
        ENV_TYPES[env_type].check([e.id for e in envs if e.type == env_type], where)


def load_env(config) -> EnvAdapter:
    """The adapter for one `[[env]]` or `[[eval.env]]` table; a `verifiers` id whose package is
    a v1 taskset (no `load_environment`) loads as `v1`."""
    env_type = config.type
    if env_type == "verifiers" and is_v1_module(config.id):
        logger.info(f"environment {config.id!r} is a verifiers v1 taskset: loading it as type v1")
        env_type = "v1"
    args = resolve(config.args, f"[[env]] {config.id!r} args")  # $VAR secrets, here only
    return ENV_TYPES[env_type](config.id, args)


def make_client(
    pool: ServerPool, timeout_s: float, max_concurrent: int, seq_len: int, api_key: str = "EMPTY"
) -> Any:
    """A verifiers chat client over the servers of `pool` that keeps at most `max_concurrent`
    requests in flight across all rollouts, sends each to the least-loaded server (moving it to
    another when its server fails) and fits every request into `seq_len` (`client.budget`)."""
    from openai import APIConnectionError, AsyncOpenAI
    from verifiers.clients import OpenAIChatCompletionsClient

    from orchestrator.client import server_root
    from orchestrator.envs.budget import TokenBudget

    budget = TokenBudget(server_root(pool.servers[0].base_url), seq_len, timeout_s)
    subs = [
        OpenAIChatCompletionsClient(
            AsyncOpenAI(base_url=s.base_url, api_key=api_key, timeout=timeout_s, max_retries=0)
        )
        for s in pool.servers
    ]

    class PooledClient(OpenAIChatCompletionsClient):
        semaphore = asyncio.Semaphore(max_concurrent)

        async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
            async with self.semaphore:
                sampling_args = await budget.cap(model, prompt, sampling_args, tools)
                tried: set[int] = set()
                while (index := pool.pick(tried)) is not None:
                    server = pool.servers[index]
                    server.in_flight += 1
                    try:
                        answer = await subs[index].get_native_response(
                            prompt, model, sampling_args, tools, **kwargs
                        )
                    except APIConnectionError as err:  # unreachable or timed out
                        tried.add(index)
                        pool.mark_down(index, err)
                        if len(tried) == len(subs):
                            raise
                        continue
                    finally:
                        server.in_flight -= 1
                    server.served += 1
                    return answer

        async def close(self) -> None:
            for sub in subs:
                await sub.close()

    client = PooledClient(subs[0].client)
    client.budget = budget
    return client


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
