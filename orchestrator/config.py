"""Orchestrator config schema (pydantic and the standard library only)."""

import os
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from rlcore.config.base import BaseConfig, ModelConfig, PositiveInt, SharedFields, note_renamed

PositiveFloat = Annotated[float, Field(gt=0)]


class SamplingConfig(BaseConfig):
    """Sampling for training rollouts. Every parameter is sent with each request (nothing is
    left for the server or the model folder's generation_config.json to fill in), and the
    trainer recomputes the same distribution: softmax(logits / temperature) over the whole
    vocabulary. Filters it cannot reproduce (top_p < 1, top_k, min_p, penalties) are refused:
    they would bias every importance ratio."""

    max_tokens: PositiveInt = 256
    """Most tokens the policy may generate per turn (capped so prompt + completion fit
    seq_len)."""

    temperature: float = 1.0
    """Sampling temperature (> 0); the trainer scales its logits by the same value."""

    top_p: float = 1.0
    """Nucleus sampling threshold; must be 1.0 (off) for training rollouts."""

    top_k: int = 0
    """Top-k filter; must be 0 (off) for training rollouts."""

    min_p: float = 0.0
    """Min-p filter; must be 0.0 (off) for training rollouts."""

    repetition_penalty: float = 1.0
    """Repetition penalty; must be 1.0 (off) for training rollouts."""

    @field_validator("temperature")
    @classmethod
    def validate_temperature(cls, value: float) -> float:
        if value == 0:
            raise ValueError(
                "sampling.temperature = 0 is greedy decoding: the policy has no distribution to "
                "train on and the trainer would divide its logits by 0; use a temperature > 0 "
                "(e.g. 1.0)"
            )
        if value < 0:
            raise ValueError(f"sampling.temperature = {value}: it must be greater than 0")
        return value

    @model_validator(mode="after")
    def validate_reproducible(self) -> "SamplingConfig":
        neutral = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}
        changed = {k: getattr(self, k) for k, v in neutral.items() if getattr(self, k) != v}
        if changed:
            fixes = ", ".join(f"sampling.{k} = {neutral[k]}" for k in changed)
            raise ValueError(
                f"sampling {changed} filters the sampling distribution, which the trainer's "
                f"full-softmax logprobs cannot reproduce (every importance ratio would be "
                f"biased): set {fixes}, and shape exploration with sampling.temperature instead"
            )
        return self


EnvType = Literal["verifiers", "v1"]


class EnvConfig(BaseConfig):
    type: EnvType = "verifiers"
    """Environment type: `verifiers` is a classic verifiers environment, loaded with
    `load_environment(id, **args)` (a package that exports a v1 Taskset instead loads as `v1`);
    `v1` is a verifiers v1 taskset (`args`: its config fields, plus `harness`, `max_turns`)."""

    id: str
    """Verifiers environment id, e.g. `rl-add-digits` or `owner/name` (resolved to the
    installed module `name`)."""

    args: dict[str, Any] = {}
    """Keyword arguments passed to the environment's `load_environment`."""

    name: str | None = None
    """Label of this environment in metrics (`reward/<name>`); None uses the id."""

    weight: PositiveFloat = 1.0
    """Relative share of training examples drawn from this environment."""


class EvalEnvConfig(BaseConfig):
    type: EnvType = "verifiers"
    """Environment type, as in `[[env]]`."""

    id: str
    """Verifiers environment id to evaluate on."""

    args: dict[str, Any] = {}
    """Keyword arguments passed to the environment's `load_environment`."""

    num_examples: PositiveInt = 16
    """Examples evaluated per eval round."""

    rollouts_per_example: PositiveInt = 1
    """Rollouts per eval example."""


class EvalConfig(BaseConfig):
    interval: PositiveInt = 50
    """Evaluate every this many steps and after the last step."""

    env: list[EvalEnvConfig] = []
    """Environments to evaluate on."""

    eval_base_model: bool = True
    """Also evaluate the base policy before the first step."""


class ClientConfig(BaseConfig):
    base_url: str | list[str] | None = None
    """OpenAI-compatible endpoint of the inference server, e.g. `http://127.0.0.1:8000/v1`, or a
    list of several servers (requests go to the least-loaded one, weight updates to all); None
    derives it from the inference config under `rl`, else uses `http://127.0.0.1:8000/v1`."""

    timeout_s: PositiveFloat = 600.0
    """Seconds one inference request may take before the step fails."""

    health_timeout_s: PositiveFloat = 600.0
    """Seconds to wait for the inference server to become healthy at start."""

    max_concurrent: PositiveInt = 32
    """Most rollout requests in flight at once."""

    api_key_var: str = "VLLM_API_KEY"
    """Environment variable holding the key of a server that requires one (vLLM `--api-key`,
    or `VLLM_API_KEY` set for `inference`); the key itself never goes into a config."""

    @field_validator("base_url")
    @classmethod
    def check_base_urls(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError("base_url is an empty list: give at least one server URL")
        return value

    @property
    def base_urls(self) -> list[str]:
        """Every server's URL (the default one when none is set)."""
        if self.base_url is None:
            return ["http://127.0.0.1:8000/v1"]
        return [self.base_url] if isinstance(self.base_url, str) else list(self.base_url)

    @property
    def api_key(self) -> str:
        return os.environ.get(self.api_key_var) or "EMPTY"


class AdvantageConfig(BaseConfig):
    std_normalize: bool = False
    """Divide group-relative advantages by the group's reward standard deviation."""


class DynamicSamplingConfig(BaseConfig):
    """Dynamic sampling (DAPO): train only on groups whose rollouts got different rewards."""

    enabled: bool = False
    """Leave out groups whose rollouts all got the same reward (zero advantage: nothing to learn,
    yet they dilute the step) and generate more groups until the batch is full again; the
    skipped groups are counted in `num_skipped_groups`."""

    max_rounds: PositiveInt = 4
    """Generation rounds per step at most, the first included; a batch still short after them
    trains on the informative groups found (or, with none, on the last round's groups)."""


ARCHIVE_FREE_SHARE = 0.05
"""The archive's default bound: this share of the disk space free under output_dir at start."""


class SamplesConfig(BaseConfig):
    """The rollout archive: every rollout of every step (prompt, completion, reward and its
    parts, advantage, tokens with their text and logprobs) in `samples/step_<n>.parquet`, for
    reading after the run (`rl view`); training never reads it."""

    keep: bool = True
    """Write the archive; false writes none."""

    max_gib: PositiveFloat | None = None
    """Most GiB the archive may take; past it the oldest steps' files are deleted (said once in
    the log). None: 5% of the disk space free under output_dir when the orchestrator starts."""

    def bound_bytes(self, free: int) -> int:
        """The archive's bound where `free` bytes are free under output_dir at start."""
        return (
            int(self.max_gib * 2**30)
            if self.max_gib is not None
            else int(free * ARCHIVE_FREE_SHARE)
        )

    @model_validator(mode="after")
    def validate_keep(self) -> "SamplesConfig":
        if not self.keep and self.max_gib is not None:
            raise ValueError(
                f"samples.max_gib = {self.max_gib} with samples.keep = false: the archive is "
                "off, so it has no bound; drop samples.max_gib, or set samples.keep = true"
            )
        return self


class OrchestratorConfig(SharedFields):
    """Configuration of the `orchestrator` process."""

    model: ModelConfig = ModelConfig()
    """Policy model served by inference (its name is what requests ask for)."""

    batch_size: PositiveInt = 16
    """Rollouts per training batch (examples per step × rollouts_per_example)."""

    rollouts_per_example: PositiveInt = 8
    """Rollouts per example; advantages are computed within each such group."""

    zero_truncated_rewards: bool = False
    """Score rollouts cut off by `max_tokens` (or seq_len) 0: an unfinished answer does not
    count, whatever the environment's reward function found in it."""

    mask_truncated_completions: bool = False
    """Give zero loss weight to rollouts cut off by `max_tokens` or `seq_len`."""

    sampling: SamplingConfig = SamplingConfig()
    """Sampling parameters for training rollouts."""

    env: list[EnvConfig] = [EnvConfig(id="rl-add-digits")]
    """Training environments, mixed by `weight`."""

    eval: EvalConfig | None = None
    """Periodic evaluation; None disables it."""

    client: ClientConfig = ClientConfig()
    """How to reach the inference server."""

    advantage: AdvantageConfig = AdvantageConfig()
    """Advantage estimation."""

    dynamic_sampling: DynamicSamplingConfig = DynamicSamplingConfig()
    """Skip groups with one reward for all their rollouts and sample more (off by default)."""

    weights_timeout_s: PositiveFloat = 1800.0
    """Seconds to wait for the trainer to publish the weights a step needs."""

    num_saved_samples: Annotated[int, Field(ge=0)] = 4
    """Rollouts (prompt, completion, reward) saved per step in `rollouts/step_<n>/samples.jsonl`,
    which the trainer deletes with the batch (every rollout stays in `samples`, the archive)."""

    samples: SamplesConfig = SamplesConfig()
    """The rollout archive (`samples/step_<n>.parquet`): on, bounded, or off."""

    @model_validator(mode="before")
    @classmethod
    def auto_setup_val(cls, data: Any) -> Any:
        """prime-rl's `[val]` (interval, num_examples, rollouts_per_example on the training
        environments' eval splits) is read as `[eval]` over the same environments."""
        if not isinstance(data, dict) or "val" not in data:
            return data
        data = dict(data)
        val = data.pop("val")
        if "eval" in data:
            raise ValueError("`val` (prime-rl's name) and `eval` are both set: keep only `eval`")
        if not isinstance(val, dict):
            raise ValueError(f"`val` must be a table (interval, num_examples), got {val!r}")
        per_env = {k: val[k] for k in ("num_examples", "rollouts_per_example") if k in val}
        envs = data.get("env") or [{"id": "rl-add-digits"}]
        eval_envs = [
            {"type": e.get("type", "verifiers"), "id": e["id"], "args": e.get("args", {})} | per_env
            for e in envs
            if isinstance(e, dict) and "id" in e
        ]
        extra = {k: v for k, v in val.items() if k not in ("num_examples", "rollouts_per_example")}
        data["eval"] = {**extra, "env": eval_envs}
        note_renamed("val", "eval (with one [[eval.env]] per [[env]])")
        return data

    @model_validator(mode="after")
    def validate_batch(self) -> "OrchestratorConfig":
        if self.rollouts_per_example == 1:
            raise ValueError(
                "rollouts_per_example = 1 gives every example a group of one rollout, whose "
                "group-relative advantage is always 0: nothing would be learned; use 2 or "
                "more (8 is typical)"
            )
        if self.batch_size % self.rollouts_per_example:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by rollouts_per_example "
                f"({self.rollouts_per_example}): each example gets a full group of rollouts"
            )
        if self.sampling.max_tokens > self.seq_len:
            raise ValueError(
                f"sampling.max_tokens ({self.sampling.max_tokens}) is above seq_len "
                f"({self.seq_len}), which holds prompt and completion together: lower "
                "sampling.max_tokens or raise seq_len (requests are capped to what fits)"
            )
        if not self.env:
            raise ValueError("env is empty: add at least one [[env]] table with an `id`")
        return self

    @model_validator(mode="after")
    def validate_deterministic(self) -> "OrchestratorConfig":
        if (
            self.deterministic
            and self.eval is not None
            and self.async_level > 0
            and not self.weight_transfer.serves_older_policies
        ):
            raise ValueError(
                f"weight_transfer.type = {self.weight_transfer.type!r} cannot make a "
                f"deterministic run with [eval] and async_level = {self.async_level} "
                "reproducible: an eval serves the newest policy, and only the filesystem "
                "transport serves the older one the next batch must come from. Set "
                "--weight-transfer.type filesystem, or --async-level 0, or drop [eval]"
            )
        return self
