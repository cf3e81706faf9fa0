"""The one chat client every environment uses: a verifiers client over the servers of a
ServerPool (orchestrator/servers.py), sending through the pool's one HTTP client, that keeps at
most `max_concurrent` requests in flight across all rollouts, sends each to the least-loaded
server that is up (moving it to another when its server fails) and fits every request into
`seq_len` (`budget`, counting prompts on the servers in the same way). It carries what the
environment adapters need to know about the served policy (`pool`, `base_model`,
`api_key_var`), all given at construction."""

import asyncio

from openai import APIConnectionError, AsyncOpenAI
from verifiers.clients import OpenAIChatCompletionsClient

from orchestrator.envs.budget import TokenBudget
from orchestrator.seeds import turn_seed
from orchestrator.servers import ServerPool


class PooledClient(OpenAIChatCompletionsClient):
    def __init__(
        self,
        pool: ServerPool,
        base_model: str,
        seq_len: int,
        timeout_s: float,
        max_concurrent: int,
        api_key: str = "EMPTY",
        api_key_var: str = "VLLM_API_KEY",
    ):
        self.subs = [
            OpenAIChatCompletionsClient(
                AsyncOpenAI(
                    base_url=s.base_url,
                    api_key=api_key,
                    timeout=timeout_s,
                    max_retries=0,
                    # openai takes an httpx client at run time; its annotation names httpx2's
                    http_client=pool.http,  # type: ignore[arg-type]
                )
            )
            for s in pool.servers
        ]
        super().__init__(self.subs[0].client)
        self.pool = pool
        self.base_model = base_model
        self.api_key_var = api_key_var
        self.semaphore = asyncio.Semaphore(max_concurrent)
        self.budget = TokenBudget(pool.tokenize, seq_len)

    async def get_native_response(self, prompt, model, sampling_args, tools=None, **kwargs):
        state = kwargs.get("state")
        if "seed" in sampling_args and state is not None:  # a seeded rollout's later turns
            turn = len(state.get("trajectory") or [])
            sampling_args = {**sampling_args, "seed": turn_seed(sampling_args["seed"], turn)}
        async with self.semaphore:
            sampling_args = await self.budget.cap(model, prompt, sampling_args, tools)
            tried: set[int] = set()
            while (index := self.pool.pick(tried)) is not None:
                async with self.pool.busy(index) as server:
                    try:
                        answer = await self.subs[index].get_native_response(
                            prompt, model, sampling_args, tools, **kwargs
                        )
                    except APIConnectionError as err:  # unreachable or timed out
                        tried.add(index)
                        self.pool.mark_down(index, err)
                        if len(tried) == len(self.subs):
                            raise
                        continue
                server.served += 1
                return answer

    async def close(self) -> None:
        """Closes the pool's HTTP client, which every sub-client sends through."""
        await self.pool.close()
