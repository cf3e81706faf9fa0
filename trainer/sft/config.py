"""`sft @ sft.toml`: the supervised fine-tuning config (pydantic and the standard library only).

The keys mean what they mean in `trainer @ train.toml` (`[model]`, `[optim]`, `[lora]`,
`[ckpt]`, `[wandb]`, `max_steps`, `seq_len`, `output_dir`, `seed`, `deterministic`); `[data]`
and `[val]` are SFT's own, with prime-rl's names where it has one (`data.batch_size`,
`data.seq_len` is read too).
"""

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from rlcore.config.base import (
    NONE_STRINGS,
    RUNS_ROOT,
    BaseConfig,
    CkptConfig,
    LogConfig,
    PositiveInt,
    UserPath,
    WandbConfig,
    note_renamed,
)
from trainer.config import CPU_MICRO_BATCH_TOKENS, LoraConfig, OptimConfig, TrainerModelConfig


class SFTDataConfig(BaseConfig):
    """Where the examples come from and how many make one optimizer step."""

    name: str
    """A local `.jsonl`, `.json` or `.parquet` file, a folder written by `datasets`'
    `save_to_disk`, or a dataset name on the hub. Rows hold `messages` (a chat: the loss is on
    the assistant turns) or `prompt` and `completion` (text or chat messages: the loss is on
    the completion)."""

    split: str = "train"
    """The split to train on (a single file is its own `train` split)."""

    batch_size: PositiveInt = 8
    """Examples per optimizer step."""

    micro_batch_tokens: PositiveInt | None = None
    """Tokens packed into one forward pass (examples are packed end to end, attention kept
    within each); None: as the RL trainer, `seq_len` on GPUs and at least 512 on CPU. Every pass
    also pays for the whole model's gradient, so short examples want many per pass (SmolLM2-135M
    on CPU: 32 examples of 30 tokens took about 40x longer in 64-token passes than in one pass of
    1024). Lower it to save memory."""

    shuffle: bool = True
    """Shuffle the examples every epoch with `seed` (the order is a function of the step, so a
    resumed run sees the same examples)."""

    overlong: Literal["truncate", "drop"] = "truncate"
    """An example longer than `seq_len`: cut it to `seq_len` tokens, or leave it out. Either way
    the log counts them."""

    seq_len: PositiveInt | None = None
    """prime-rl's place for `seq_len`: read as the top-level `seq_len`."""


class SFTValConfig(BaseConfig):
    """A held-out loss, reported as `val/loss` in metrics.jsonl."""

    split: str = "validation"
    """Split of `data.name` to evaluate on (or of `val.name` when set)."""

    name: str | None = None
    """Another file, folder or hub dataset for validation; None uses `data.name`."""

    interval: PositiveInt = 50
    """Report the validation loss every this many steps (and after the last step)."""

    num_examples: PositiveInt | None = None
    """Evaluate on the first this many validation examples; None: all of them."""


class SFTConfig(BaseConfig):
    """Supervised fine-tuning: next-token loss on the assistant or completion tokens of a chat
    or prompt/completion dataset. The final model lands in `output_dir/weights/step_<n>` as a
    plain Hugging Face folder that `--model.name PATH` of an RL run loads as it is."""

    max_steps: Annotated[int, Field(gt=0, le=10_000_000)] = 100
    """Optimizer steps to take (the data repeats, reshuffled, as often as needed)."""

    seq_len: Annotated[int, Field(gt=0, le=1 << 20)] = 2048
    """Maximum tokens of one example, prompt and completion together."""

    output_dir: UserPath = RUNS_ROOT / "sft"
    """Run directory: configs, logs, checkpoints, weights, metrics.jsonl."""

    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Seeds the data order and any random initialisation (LoRA adapters)."""

    deterministic: bool = False
    """Deterministic algorithms and fixed thread counts: the same config, seed and data give
    the same run bit for bit on the same machine."""

    model: TrainerModelConfig = TrainerModelConfig()
    optim: OptimConfig = OptimConfig(lr=1e-5)
    lora: LoraConfig | None = None
    """Train LoRA adapters only (then `lora_output` says how the result is written)."""

    data: SFTDataConfig
    val: SFTValConfig | None = None
    """A held-out loss; None: none."""

    lora_output: Literal["merged", "adapter"] = "merged"
    """With `[lora]`: write the final model with the adapters merged into a full folder (what
    an RL run's `--model.name` loads), or as a PEFT adapter folder."""

    ckpt: CkptConfig = CkptConfig()
    wandb: WandbConfig = WandbConfig()
    log: LogConfig = LogConfig()

    @model_validator(mode="before")
    @classmethod
    def read_data_seq_len(cls, data: Any) -> Any:
        section = data.get("data") if isinstance(data, dict) else None
        if not isinstance(section, dict) or "seq_len" not in section:
            return data
        data = {**data, "data": {k: v for k, v in section.items() if k != "seq_len"}}
        if section["seq_len"] not in (None, *NONE_STRINGS):
            note_renamed("data.seq_len", "seq_len")
            data.setdefault("seq_len", section["seq_len"])
        return data

    def tokens_per_pass(self, on_cpu: bool) -> int:
        """`data.micro_batch_tokens`, or the RL trainer's default on this device."""
        default = max(self.seq_len, CPU_MICRO_BATCH_TOKENS) if on_cpu else self.seq_len
        return self.data.micro_batch_tokens or default

    @model_validator(mode="after")
    def check_micro_batch(self) -> "SFTConfig":
        tokens = self.data.micro_batch_tokens
        if tokens is not None and tokens < self.seq_len:
            raise ValueError(
                f"data.micro_batch_tokens = {tokens} is below seq_len = {self.seq_len}: an example "
                "of seq_len tokens would not fit one pass; raise it or lower seq_len"
            )
        return self


def source_path(name: str) -> Path | None:
    """The local file or folder `name` names, or None for a hub name."""
    path = Path(name).expanduser()
    return path if path.exists() else None
