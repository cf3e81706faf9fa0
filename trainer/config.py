"""Trainer config schema (pydantic and the standard library only)."""

from typing import Annotated, Literal

from pydantic import Field, model_validator

from rlcore.config.base import BaseConfig, ModelConfig, PositiveInt, SharedFields, note_renamed

PositiveFloat = Annotated[float, Field(gt=0)]


class ActivationCheckpointConfig(BaseConfig):
    """prime-rl's `[model.ac]` table: its presence turns activation checkpointing on."""

    freq: PositiveInt = 1
    """Checkpoint every `freq`-th decoder layer (read as `activation_checkpointing_freq`)."""


class TrainerModelConfig(ModelConfig):
    """The policy: which model, in which dtype, with which memory savers."""

    renamed = {"attn": "attn_implementation"}

    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Compute dtype of the forward and backward pass (autocast on CPU, FSDP2's mixed-precision
    policy on GPUs); parameters and optimizer state are always fp32 master copies. `auto`: bf16
    on a GPU and on a CPU with native bf16 (AVX512_BF16, AMX), fp32 on other CPUs, where bf16
    runs about 4x slower (rlcore/host/machine.py); an explicit bfloat16 there is kept, with a
    warning."""

    serving_dtype: Literal["bfloat16", "float16", "float32"] | None = None
    """Dtype of the published weights (the inference engine's dtype); None publishes in the
    compute dtype `dtype`. Under `rl` it is set to `inference.model.dtype`. Master weights are
    fp32 either way."""

    activation_checkpointing: bool | Literal["auto"] = "auto"
    """Recompute activations in the backward pass to save memory (slower, longer sequences).
    `auto`: only where the memory estimate needs it (trainer/speed_policy.py): off where it fits the
    trainer's memory without, else on for as few layers as fit (`activation_checkpointing_freq`
    chosen)."""

    activation_checkpointing_freq: PositiveInt = 1
    """With activation checkpointing, recompute every n-th decoder layer only (1: all layers;
    2: half of them, trading memory for speed)."""

    compile: bool | Literal["auto"] = "auto"
    """Compile each decoder layer with torch.compile (needs a C++ compiler; compiled kernels
    are cached under the cache folder's `compile/`, so a restart compiles from cache). `auto`:
    where it pays for itself within the run, from compile and step times measured on this
    kind of machine, scaled to the model and the tokens per step (trainer/speed_policy.py: for
    SmolLM2-135M on 512 tokens a step, after about 30 steps on a native-bf16 CPU; a few hundred
    steps of 16k tokens on a GPU; never on a CPU computing in fp32, where compiled steps
    measured no faster)."""

    logprob_chunk_tokens: PositiveInt | None = 2048
    """Compute the loss's logprobs from the final hidden states this many tokens at a time, only
    at loss positions, never holding [tokens x vocab] fp32 logits for a whole micro-batch
    (trainer/logprob_head.py); None computes full logits as transformers does."""

    attn_implementation: Literal[
        "auto",
        "varlen",
        "sdpa",
        "eager",
        "flex_attention",
        "flash_attention_2",
        "flash_attention_3",
    ] = "auto"
    """Attention kernel. `auto`: on CUDA in bf16/fp16 flash-attn's kernels when installed, else
    `varlen` (torch's variable-length flash attention: packed samples without a dense mask);
    on a CPU `varlen` too (sdpa sample by sample) where rows carry no shared-prompt mask and
    the model does not compile (`sft`; 20-25% faster steps on short chats), sdpa otherwise and
    in fp32 on CUDA; and only a kernel that does what the model needs (Gemma-2's
    attention-logit softcapping: flash-attn, else eager). The log says which one runs and why
    (trainer/attention.py)."""

    ac: ActivationCheckpointConfig | None = None
    """prime-rl's activation-checkpointing table (read as `activation_checkpointing = true`)."""

    @model_validator(mode="after")
    def auto_setup_ac(self) -> "TrainerModelConfig":
        if self.ac is not None:
            note_renamed("model.ac", "model.activation_checkpointing = true")
            self.activation_checkpointing_freq = self.ac.freq
            self.activation_checkpointing, self.ac = True, None
        return self


class OptimConfig(BaseConfig):
    """AdamW and its learning-rate schedule; one optimizer step per batch."""

    lr: PositiveFloat = 1e-6
    """Peak learning rate of AdamW."""

    weight_decay: Annotated[float, Field(ge=0)] = 0.0
    """AdamW decoupled weight decay."""

    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW beta1 and beta2."""

    eps: PositiveFloat = 1e-8
    """AdamW epsilon."""

    max_norm: PositiveFloat | None = 1.0
    """Clip the global gradient norm to this value; None disables clipping."""

    warmup_steps: Annotated[int, Field(ge=0)] = 0
    """Steps of linear warmup from 0 to `lr`."""

    scheduler: Literal["constant", "linear", "cosine"] = "constant"
    """Learning-rate schedule after warmup, decaying towards `min_lr` at `max_steps`."""

    min_lr: Annotated[float, Field(ge=0)] = 0.0
    """Final learning rate of the linear and cosine schedules."""

    fused: bool | Literal["auto"] = "auto"
    """AdamW's fused kernel (one kernel for every parameter). `auto`: on CUDA, off on CPU."""


DEFAULT_LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


class LoraConfig(BaseConfig):
    """Low-rank adapters (LoRA): only the adapters train (fp32, with their AdamW state); the
    base weights stay frozen, each published policy is an adapter folder, and checkpoints hold
    the adapter and its optimizer state only."""

    rank: PositiveInt = 16
    """Rank r of each adapter (the inner size of B @ A)."""

    alpha: PositiveFloat = 32.0
    """Scaling numerator: the adapter adds (alpha / rank) * B @ A to each target weight."""

    dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """Dropout on the adapter's input while training; keep 0 for RL, since the engine samples
    without it and the first step's parity check compares the two."""

    target_modules: list[str] = DEFAULT_LORA_TARGETS
    """Names of the linear layers that get an adapter (the last part of the module name, e.g.
    `q_proj`); every matching layer in every decoder block is adapted."""

    @model_validator(mode="after")
    def validate_targets(self) -> "LoraConfig":
        if not self.target_modules:
            raise ValueError(
                "lora.target_modules is empty: name at least one linear layer, e.g. "
                '["q_proj", "v_proj"]'
            )
        return self


# Loss variants. `ratio` is exp(logp_trainer - logp_inference) of one sampled token: the trainer
# recomputes no "old" policy, so one ratio measures both the policy's staleness (async_level)
# and the trainer/inference mismatch. docs/losses.md compares them with the peers' definitions.


class RatioClipLossConfig(BaseConfig):
    """PPO's clipped surrogate -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A), asymmetric
    ("clip-higher", DAPO's 0.2 / 0.28). Unbounded for A < 0 and r above the clip."""

    type: Literal["ratio_clip"] = "ratio_clip"
    """Loss variant."""

    clip_low: Annotated[float, Field(ge=0, lt=1)] = 0.2
    """Lower clip: the ratio is kept above 1 - clip_low."""

    clip_high: Annotated[float, Field(ge=0)] = 0.28
    """Upper clip: the ratio is kept below 1 + clip_high."""


class DualClipLossConfig(RatioClipLossConfig):
    """`ratio_clip` whose loss for A < 0 is also capped at c |A| (verl's dual-clip): a token far
    more likely now than when sampled stops pushing once r > c."""

    type: Literal["dual_clip"] = "dual_clip"  # type: ignore[assignment]
    """Loss variant."""

    c: Annotated[float, Field(gt=1)] = 3.0
    """Dual-clip bound: for A < 0 the loss is at most c |A| (verl's clip_ratio_c)."""

    @model_validator(mode="after")
    def validate_c(self) -> "DualClipLossConfig":
        if self.c <= 1 + self.clip_high:
            raise ValueError(
                f"loss.c = {self.c} must exceed 1 + loss.clip_high ({1 + self.clip_high:g}), or "
                "the dual clip cuts into PPO's own clip range: raise loss.c (3 is typical)"
            )
        return self


class RatioMaskLossConfig(BaseConfig):
    """Token-level importance-ratio masking: -r A for tokens with low <= r <= high; tokens
    outside are dropped (no gradient)."""

    type: Literal["ratio_mask"] = "ratio_mask"
    """Loss variant."""

    low: Annotated[float, Field(ge=0)] = 0.5
    """Tokens with ratio below this are masked out."""

    high: Annotated[float, Field(gt=0)] = 2.0
    """Tokens with ratio above this are masked out."""

    @model_validator(mode="after")
    def validate_bounds(self) -> "RatioMaskLossConfig":
        if self.low >= self.high:
            raise ValueError(f"loss.low ({self.low}) must be below loss.high ({self.high})")
        return self


class SequenceMaskLossConfig(RatioMaskLossConfig):
    """Sequence-level importance-ratio masking: -r A per token, and every token of a sample
    whose length-normalised ratio exp(mean log r) leaves [low, high] is dropped."""

    type: Literal["sequence_mask"] = "sequence_mask"  # type: ignore[assignment]
    """Loss variant."""

    low: Annotated[float, Field(ge=0)] = 0.8
    """Samples whose geometric-mean ratio is below this are masked out."""

    high: Annotated[float, Field(gt=0)] = 1.25
    """Samples whose geometric-mean ratio is above this are masked out."""


class ProbMaskLossConfig(BaseConfig):
    """prime-rl's default: -r A, except tokens whose probability moved more than `mask_high`
    up (A > 0) or `mask_low` down (A < 0) since sampling are dropped; plus kl_tau (log r)^2
    on every token."""

    type: Literal["prob_mask"] = "prob_mask"
    """Loss variant."""

    mask_low: Annotated[float, Field(gt=0, le=1)] = 0.2
    """For A < 0, drop tokens whose probability fell by more than this (absolute)."""

    mask_high: Annotated[float, Field(gt=0, le=1)] = 0.2
    """For A > 0, drop tokens whose probability rose by more than this (absolute)."""

    kl_tau: Annotated[float, Field(ge=0)] = 1e-3
    """Weight of the (log r)^2 penalty on every trained token; 0 turns it off."""


class TisLossConfig(BaseConfig):
    """Truncated importance sampling: -sg(min(r, cap)) A log p; the policy gradient weighted by
    the ratio, truncated at `cap` (bounded for either sign of A)."""

    type: Literal["tis"] = "tis"
    """Loss variant."""

    cap: Annotated[float, Field(ge=1)] = 2.0
    """Largest importance weight a token gets."""


class GspoLossConfig(BaseConfig):
    """GSPO: PPO's clip on the length-normalised sequence ratio s = exp(mean log r) of each
    sample, the gradient spread over its tokens (GSPO-token with one advantage per sample)."""

    type: Literal["gspo"] = "gspo"
    """Loss variant."""

    clip_low: Annotated[float, Field(ge=0, lt=1)] = 3e-4
    """Lower clip of the sequence ratio: s is kept above 1 - clip_low (GSPO paper: 3e-4)."""

    clip_high: Annotated[float, Field(ge=0)] = 4e-4
    """Upper clip of the sequence ratio: s is kept below 1 + clip_high (GSPO paper: 4e-4)."""


LossConfig = Annotated[
    RatioClipLossConfig
    | DualClipLossConfig
    | RatioMaskLossConfig
    | SequenceMaskLossConfig
    | ProbMaskLossConfig
    | TisLossConfig
    | GspoLossConfig,
    Field(discriminator="type"),
]


class FakeDataConfig(BaseConfig):
    """Synthetic batches of a fixed shape, for throughput tests without an orchestrator."""

    batch_size: PositiveInt = 8
    """Samples per synthetic batch."""

    seq_len: PositiveInt | None = None
    """Tokens per synthetic sample; None uses the trainer's `seq_len`."""


class DataConfig(BaseConfig):
    """Where training batches come from and how they are cut into forward passes."""

    fake: FakeDataConfig | None = None
    """Train on synthetic batches of this shape instead of orchestrator batches (throughput
    tests, no orchestrator needed; checkpoints then complete with the trainer's part alone);
    None reads real batches."""

    micro_batch_tokens: PositiveInt | None = None
    """Tokens packed into one forward pass (several samples per row, attention kept within each
    sample); None uses `seq_len` on GPUs and on CPU at least 512 (measured on the quick start:
    512-token passes train 11% faster than 256 and 24% faster than the whole batch at once,
    with less memory)."""

    wait_timeout_s: PositiveFloat = 1800.0
    """Seconds to wait for the orchestrator's next batch before giving up."""

    share_prompts: bool = True
    """Samples with the same prompt (a group's rollouts) go through the model with one copy of
    the prompt, each completion attending to it and to itself: the same logprobs and gradients
    for fewer tokens (the quick start trains on 36% of them). Needs sdpa attention (the CPU
    default) and no sliding window shorter than seq_len; elsewhere off, and the log says why."""


class ParityConfig(BaseConfig):
    """The check, on the first step of every attempt, that the trainer computes the same token
    logprobs as the inference engine that sampled them."""

    enabled: bool = True
    """Run the check (skipped on synthetic batches)."""

    max_mismatch_kl: PositiveFloat | None = None
    """Stop when the first step's mismatch_kl exceeds this; None means 1e-2 when computing in
    bf16 or fp16 and 1e-3 in fp32."""


CPU_MICRO_BATCH_TOKENS = 512


class TrainerConfig(SharedFields):
    """Configuration of the `trainer` process."""

    model: TrainerModelConfig = TrainerModelConfig()
    """Policy model to train."""

    optim: OptimConfig = OptimConfig()
    """Optimizer and learning-rate schedule."""

    loss: LossConfig = DualClipLossConfig()
    """Policy-gradient objective; pick a variant with `type` (docs/losses.md)."""

    data: DataConfig = DataConfig()
    """Where batches come from and how they are packed."""

    parity: ParityConfig = ParityConfig()
    """Trainer/inference logprob parity check at the start of every run."""

    lora: LoraConfig | None = None
    """Train low-rank adapters instead of the whole model (`[lora]`); None trains every
    weight (full fine-tuning)."""

    nodes: PositiveInt = 1
    """Nodes the trainer spans: torchrun joins them at MASTER_ADDR:MASTER_PORT (from the
    environment; `rl` sets them inside a SLURM job), node rank from NODE_RANK or SLURM_NODEID."""

    on_nonfinite: Literal["skip", "stop"] = "skip"
    """What a step whose loss or gradient norm is NaN/inf does: `skip` drops that update (the
    last good weights keep serving), `stop` ends the run."""

    def tokens_per_pass(self, on_cpu: bool) -> int:
        """`data.micro_batch_tokens`, or its default on this device."""
        default = max(self.seq_len, CPU_MICRO_BATCH_TOKENS) if on_cpu else self.seq_len
        return self.data.micro_batch_tokens or default

    @model_validator(mode="after")
    def validate_micro_batch(self) -> "TrainerConfig":
        mbt = self.data.micro_batch_tokens
        if mbt is not None and mbt < self.seq_len:
            raise ValueError(
                f"data.micro_batch_tokens ({mbt}) is below seq_len ({self.seq_len}): one sample "
                "must fit a micro-batch; raise it or leave it unset"
            )
        return self
