"""The one place that talks to verifiers (0.3.x classic API: `load_environment`, `run_group`,
`state["trajectory"]` with token ids and logprobs from vLLM's `return_token_ids`).

Everything else in the orchestrator sees only `Rollout` / `Turn` and `LoadedEnv`, so a later
verifiers API (0.4's `verifiers.v1` tasksets) can be added as a second adapter beside this one.
"""

import asyncio
import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any

from orchestrator.client import OrchestratorError
from rlcore.errors import ConfigError

logger = logging.getLogger("orchestrator")


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


def module_name(env_id: str) -> str:
    """The module verifiers imports for `env_id`: dashes become underscores and an `owner/`
    prefix is dropped (`harleycooper/dakota1890` -> `dakota1890`)."""
    return env_id.replace("-", "_").split("/")[-1]


def check_installed(env_ids: list[str], where: str = "env") -> None:
    """Raise ConfigError naming every environment whose module is not importable; cheap (no
    verifiers import), so it runs before anything starts."""
    missing = [
        i for i in dict.fromkeys(env_ids) if importlib.util.find_spec(module_name(i)) is None
    ]
    if not missing:
        return
    lines = [
        f"  {i!r} (module `{module_name(i)}`): install it with "
        f"`uv pip install {i.split('/')[-1]}` or add it to the project's dependencies"
        for i in missing
    ]
    raise ConfigError(
        f"{where}: environment{'s' if len(missing) > 1 else ''} not installed:\n"
        + "\n".join(lines)
        + "\n  (bundled environments: rl-add-digits, rl-repeat-word, rl-guess-number)"
    )


class LoadedEnv:
    """A verifiers environment loaded with `load_environment(id, **args)`."""

    def __init__(self, env_id: str, args: dict[str, Any]):
        import verifiers as vf
        from datasets import disable_progress_bars

        disable_progress_bars()
        self.id = env_id
        try:
            self.env = vf.load_environment(env_id, **args)
        except Exception as err:  # verifiers wraps import and argument errors alike
            raise ConfigError(
                f"environment {env_id!r} with args {args} failed to load: {err}"
            ) from None
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
        self, example: dict, num_rollouts: int, client: Any, model: str, sampling: dict
    ) -> list[Rollout]:
        """Run `num_rollouts` rollouts of one example and score them as a group."""
        inputs = [_rollout_input(example) for _ in range(num_rollouts)]
        outputs = await self.env.run_group(
            inputs, client, model, sampling, state_columns=["trajectory"]
        )
        return [_to_rollout(out) for out in outputs]


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


def make_client(base_url: str, timeout_s: float, max_concurrent: int) -> Any:
    """A verifiers chat client for `base_url` that keeps at most `max_concurrent` requests
    in flight across all rollouts."""
    from openai import AsyncOpenAI
    from verifiers.clients import OpenAIChatCompletionsClient

    class LimitedClient(OpenAIChatCompletionsClient):
        semaphore = asyncio.Semaphore(max_concurrent)

        async def get_native_response(self, *args, **kwargs):
            async with self.semaphore:
                return await super().get_native_response(*args, **kwargs)

    openai_client = AsyncOpenAI(
        base_url=base_url, api_key="EMPTY", timeout=timeout_s, max_retries=0
    )
    return LimitedClient(openai_client)


def sampling_args(max_tokens: int, temperature: float, top_p: float) -> dict:
    """Sampling arguments that also ask vLLM for token ids and per-token logprobs."""
    return {
        "max_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "logprobs": True,
        "extra_body": {"return_token_ids": True},
    }
