"""Token budget per request: prompt + completion must fit `seq_len`. A request whose prompt
leaves less room than `max_tokens` gets `max_tokens` cut to what fits (so `max_tokens` may be
as large as `seq_len`, as in prime-rl); one whose prompt leaves none fails that rollout."""

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

logger = logging.getLogger("orchestrator")
# Chat-template tokens a message may add around its text (role markers, separators).
TEMPLATE_TOKENS_PER_MESSAGE = 32


class PromptTooLongError(ValueError):
    """A prompt that leaves no room for a completion within seq_len."""


class TokenBudget:
    """Caps `max_tokens` per request; counts prompts with the servers' own /tokenize (their
    chat template; `tokenize`: ServerPool.tokenize, spread over the servers like generation),
    only when a cheap upper bound says the prompt might not leave enough room."""

    def __init__(self, tokenize: Callable[[dict[str, Any]], Awaitable[int]], seq_len: int):
        self.tokenize, self.seq_len = tokenize, seq_len
        self.num_capped = 0
        self.warned = False

    def upper_bound(self, prompt: list, tools: Any) -> int:
        """At most one token per character, plus template tokens per message."""
        text = json.dumps(prompt, default=str) + json.dumps(tools or [], default=str)
        return len(text) + TEMPLATE_TOKENS_PER_MESSAGE * (len(prompt) + 1)

    async def count(self, model: str, prompt: list, tools: Any) -> int:
        body: dict[str, Any] = {"model": model, "messages": prompt, "add_generation_prompt": True}
        if tools:
            body["tools"] = tools
        return await self.tokenize(body)

    async def cap(self, model: str, prompt: list, sampling: dict, tools: Any) -> dict:
        """`sampling` with max_tokens lowered to what fits next to this prompt."""
        max_tokens = sampling.get("max_tokens")
        if max_tokens is None or max_tokens + self.upper_bound(prompt, tools) <= self.seq_len:
            return sampling
        try:
            room = self.seq_len - await self.count(model, prompt, tools)
        except httpx.HTTPError as err:
            if not self.warned:
                logger.warning(f"cannot count prompt tokens ({err}): requests are not capped")
                self.warned = True
            return sampling
        if room >= max_tokens:
            return sampling
        if room <= 0:
            if not self.warned:
                logger.warning(
                    f"a prompt fills all of seq_len ({self.seq_len} tokens): its rollouts fail "
                    "and are left out of training; raise seq_len or shorten the prompts"
                )
                self.warned = True
            raise PromptTooLongError(f"prompt leaves no room within seq_len {self.seq_len}")
        self.num_capped += 1
        return {**sampling, "max_tokens": room}

    def take_num_capped(self) -> int:
        """Requests capped since the last call (a per-step metric)."""
        count, self.num_capped = self.num_capped, 0
        return count
