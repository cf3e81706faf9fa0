"""`evals @ eval.toml`: the evaluation config (pydantic and the standard library only).

`[[eval.env]]` tables carry the keys of the orchestrator's `[eval]` (`id`, `args`,
`num_examples`, `rollouts_per_example`); the model is `model.name`, a run's step (`--run RUN
--step N`), or whatever a running server serves (`client.base_url`).
"""

from typing import Annotated, Any

from pydantic import Field, model_validator

from orchestrator.config import ClientConfig, EvalEnvConfig
from rlcore.config.base import RUNS_ROOT, BaseConfig, LogConfig, ModelConfig, PositiveInt, UserPath


class EvalSamplingConfig(BaseConfig):
    """Sampling of every evaluation request (filters are allowed here: nothing trains on it)."""

    max_tokens: PositiveInt = 256
    """Most tokens per model turn."""

    temperature: Annotated[float, Field(ge=0)] = 1.0
    """Sampling temperature; 0 is greedy decoding."""

    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    """Nucleus sampling threshold."""


class EvalsEvalConfig(BaseConfig):
    env: list[EvalEnvConfig]
    """Environments to evaluate on, each with its number of examples and rollouts."""

    pass_threshold: float = 1.0
    """A rollout passes when its reward is at least this (for pass@k)."""

    @model_validator(mode="after")
    def check_envs(self) -> "EvalsEvalConfig":
        if not self.env:
            raise ValueError("eval.env is empty: add an [[eval.env]] table with an `id`")
        return self


class EvalsConfig(BaseConfig):
    """Evaluate a model on [[eval.env]] environments: with its own inference server, against
    a running one (`client.base_url`), or a run's checkpoint (`--run RUN --step N`). Writes
    results.jsonl (one line per rollout) and summary.json (per environment: mean reward,
    pass@k, each metric's mean, tokens) into `output_dir` and prints a table."""

    output_dir: UserPath = RUNS_ROOT / "eval"
    """Where results.jsonl, summary.json, the resolved config and the server's log go."""

    model: ModelConfig = ModelConfig()
    """The model to evaluate (a hub name or a local folder); a running server must serve it."""

    run: str | None = None
    """Evaluate a run's policy instead of `model.name`: the run folder, or its name under
    outputs/."""

    step: int = -1
    """With `run`: the step whose weights or checkpoint to evaluate; -1 is the newest."""

    watch: str | None = None
    """Follow a run (its folder, or its name under outputs/) while it trains: evaluate each new
    policy (published weights or checkpoint) as it appears with one server of its own that
    swaps to it, write `step_<n>/` results here, and log each step's figures into the run's
    metrics.jsonl (component `evals`) and W&B run. Ends when the run has ended and every step
    it left is evaluated."""

    watch_interval_s: Annotated[float, Field(gt=0)] = 10.0
    """With `watch`: seconds between looks at the run for a new policy."""

    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Every rollout samples with a seed derived from (seed, env, example, rollout): the same
    policy and seed give the same results from a folder, a server or a checkpoint."""

    eval: EvalsEvalConfig
    sampling: EvalSamplingConfig = EvalSamplingConfig()
    client: ClientConfig = ClientConfig()
    """A running server (`base_url`); None starts an inference server of its own."""

    inference: dict[str, Any] = {}
    """Settings of its own inference server, as the keys of infer.toml (e.g.
    `{ server = { port = 8123 }, cpu = { kvcache_space_gib = 1 } }`); checked by `inference`."""

    seq_len: PositiveInt = 2048
    """Longest prompt + completion of one request."""

    log: LogConfig = LogConfig()

    @model_validator(mode="after")
    def check_step(self) -> "EvalsConfig":
        if self.run is None and self.step != -1:
            raise ValueError(f"step = {self.step} needs `run` (--run RUN): the run to take it from")
        if self.step < -1:
            raise ValueError(f"step = {self.step}: give a step number or -1 for the newest")
        if self.watch is not None and self.run is not None:
            raise ValueError(
                f"watch = {self.watch!r} and run = {self.run!r}: give one (--watch follows a "
                "run and evaluates every new step; --run --step evaluates one step)"
            )
        if self.watch is not None and self.client.base_url:
            raise ValueError(
                f"watch = {self.watch!r} with client.base_url = {self.client.base_url!r}: "
                "--watch swaps each new policy into a server of its own; drop --client.base-url"
            )
        return self
