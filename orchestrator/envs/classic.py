"""The classic verifiers adapter (`type = "verifiers"`, the default): verifiers 0.3.x's
`load_environment`, `run_group` and `state["trajectory"]` with token ids and logprobs from
vLLM's `return_token_ids`. The only module that imports verifiers' environment API.

Every rollout's state carries `state["rng"]`, a `random.Random` of its own: in a deterministic
run it is seeded from the rollout's seed (so an environment that draws random numbers from it
draws the same ones every run, however rollouts interleave); otherwise from the OS.
"""

import asyncio
import logging
import random
import time
from typing import Any

from orchestrator.client import OrchestratorError
from orchestrator.envs.base import EnvAdapter, Rollout, Turn, seeded
from orchestrator.seeds import derive_seed
from rlcore.errors import ConfigError
from rlcore.secrets import redact, scrub

logger = logging.getLogger("orchestrator")


class VerifiersEnv(EnvAdapter):
    """A classic verifiers environment loaded with `load_environment(id, **args)`."""

    def __init__(self, env_id: str, args: dict[str, Any]):
        import verifiers as vf
        from datasets import disable_progress_bars

        disable_progress_bars()
        self.id = env_id
        try:
            self.env = vf.load_environment(env_id, **args)
        except Exception as err:  # verifiers wraps import and argument errors alike
            raise ConfigError(
                f"environment {env_id!r} with args {redact(args)} failed to load: "
                f"{scrub(str(err), args)}"
            ) from None
        with_rollout_rng(self.env)
        self._train = self.env.get_dataset().to_list()
        self._eval: list[dict] | None = None

    @property
    def num_examples(self) -> int:
        return len(self._train)

    def example(self, index: int) -> dict:
        return self._train[index]

    def eval_examples(self, num_examples: int) -> list[dict]:
        if self._eval is None:
            self._eval = self.env.get_eval_dataset().to_list()
        return self._eval[:num_examples]

    async def run_group(
        self,
        example: dict,
        num_rollouts: int,
        client: Any,
        model: str,
        sampling: dict,
        seeds: list[int] | None = None,
    ) -> list[Rollout]:
        """Run `num_rollouts` rollouts of one example and score them as a group."""
        inputs = [_rollout_input(example) for _ in range(num_rollouts)]
        if seeds is None:
            outputs = await self.env.run_group(
                inputs, client, model, sampling, state_columns=["trajectory"]
            )
        else:
            outputs = await self._run_seeded_group(inputs, client, model, sampling, seeds)
        return [_to_rollout(out) for out in outputs]

    async def _run_seeded_group(
        self, inputs: list[dict], client: Any, model: str, sampling: dict, seeds: list[int]
    ) -> list[Any]:
        """verifiers' run_group (rollouts, then group scoring and cleanup), but each rollout
        with its own sampling arguments: verifiers gives a group one dict."""
        from verifiers.legacy.utils.save_utils import state_to_output

        states = await asyncio.gather(
            *(
                self.env.rollout(inp, client, model, seeded(sampling, seed))
                for inp, seed in zip(inputs, seeds, strict=True)
            )
        )
        start = time.time()
        if self.env.score_rollouts:
            await self.env.rubric.score_group(states)
        else:
            await self.env.rubric.dummy_score_group(states)
        for state in states:
            state["timing"].scoring.start, state["timing"].scoring.end = start, time.time()
        for state in states:
            await self.env.rubric.cleanup(state)
        return [state_to_output(state, ["trajectory"]) for state in states]


def with_rollout_rng(env: Any) -> None:
    """Make `env` put a per-rollout `random.Random` in `state["rng"]` as each rollout starts."""
    init_state = env.init_state

    async def init_state_with_rng(input, client, model, sampling_args=None):
        state = await init_state(input, client, model, sampling_args)
        seed = (sampling_args or {}).get("seed")
        state["rng"] = random.Random(None if seed is None else derive_seed(seed, "env"))
        return state

    env.init_state = init_state_with_rng


def _rollout_input(example: dict) -> dict:
    keys = ("prompt", "example_id", "answer", "info", "task")
    return {k: example[k] for k in keys if example.get(k) is not None}


def _to_rollout(output: Any) -> Rollout:
    turns = []
    for step in output.get("trajectory") or []:
        tokens = step.get("tokens")
        if tokens is None:
            raise OrchestratorError(
                "the inference server returned no token ids or logprobs: it must be vLLM's "
                "OpenAI server (it honours `return_token_ids` and `logprobs`)"
            )
        truncated = bool(step.get("is_truncated") or tokens.get("is_truncated"))
        turns.append(
            Turn(
                prompt_ids=list(tokens["prompt_ids"]),
                completion_ids=list(tokens["completion_ids"]),
                completion_logprobs=[float(x) for x in tokens["completion_logprobs"]],
                is_truncated=truncated,
            )
        )
    error = output.get("error")
    return Rollout(
        example_id=int(output["example_id"]),
        prompt=output.get("prompt"),
        completion=output.get("completion"),
        reward=float(output.get("reward") or 0.0),
        metrics={k: float(v) for k, v in (output.get("metrics") or {}).items()},
        turns=turns,
        is_truncated=bool(output.get("is_truncated")),
        error=None if error is None else str(error.get("message", error)),
    )
