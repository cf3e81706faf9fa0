"""The environment seam: what the orchestrator loop needs from an environment, whatever
library or protocol runs it. An adapter turns one `[[env]]` table into examples and scored
`Rollout`s; the loop, advantages and batches see nothing else.

To add an environment type: subclass `EnvAdapter` in a module of this package, register it in
`ENV_TYPES` (`orchestrator/envs/__init__.py`) under the name `[[env]] type` selects, and its
cheap install check in `INSTALL_CHECKS` (rlcore/host/environments.py), which `rl` runs before
anything starts.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Turn:
    """One model call: the tokens it saw, the tokens it produced and their logprobs."""

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    is_truncated: bool = False


@dataclass
class Rollout:
    """One scored rollout, independent of the verifiers version that produced it."""

    example_id: int
    prompt: Any
    completion: Any
    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    turns: list[Turn] = field(default_factory=list)
    is_truncated: bool = False
    error: str | None = None
    advantage: float | None = None
    """Set when the rollout went into the training batch (orchestrator.loop.build_batch)."""


class EnvAdapter(ABC):
    """One loaded environment, built from `[[env]]`'s `id` and `args`."""

    id: str

    @property
    @abstractmethod
    def num_examples(self) -> int:
        """Training examples available; the sampler draws indices below it."""

    @abstractmethod
    def example(self, index: int) -> dict:
        """Training example `index`."""

    @abstractmethod
    def eval_examples(self, num_examples: int) -> list[dict]:
        """The first `num_examples` evaluation examples."""

    @abstractmethod
    async def run_group(
        self,
        example: dict,
        num_rollouts: int,
        client: Any,
        model: str,
        sampling: dict,
        seeds: list[int] | None = None,
    ) -> list[Rollout]:
        """Run `num_rollouts` rollouts of one example against `client` (a PooledClient) and
        score them as a group. A rollout that failed has `error` set and is not trained on.
        `seeds` (deterministic runs): rollout i samples with vLLM's per-request seed `seeds[i]`
        (`seeded`), its later turns with seeds derived from it (the client mixes the turn in)."""

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to release by default
        """Release what the environment holds (servers, subprocesses); called once at the end."""


def seeded(sampling: dict, seed: int | None) -> dict:
    """`sampling` with vLLM's per-request sampling `seed` (unchanged when None)."""
    return sampling if seed is None else {**sampling, "seed": seed}
