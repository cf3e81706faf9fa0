"""The classic verifiers adapter (`type = "verifiers"`, the default): verifiers 0.3.x's
`load_environment`, `run_group` and `state["trajectory"]` with token ids and logprobs from
vLLM's `return_token_ids`. The only module that imports verifiers' environment API.
"""

import logging
from typing import Any

from orchestrator.client import OrchestratorError
from orchestrator.envs.base import EnvAdapter, Rollout, Turn
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
