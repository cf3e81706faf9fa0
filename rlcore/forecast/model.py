"""The estimate's arithmetic: FLOPs, bytes and seconds of a run from the model's shape (`Shape`),
the job (`Job`) and this machine's measured speed (`Speeds`, rlcore.forecast.calibrate). Pure:
no I/O, no clock, so the tests check it against hand-computed values.

A step is split as the run splits it: generate (inference: prefill and one decode iteration per
answer token and turn), the orchestrator's wait for the policy, train (forward, backward and
AdamW) and publish (the policy to inference). With LoRA, the adapters add their own products
and ops to a training step (whose frozen base needs no weight gradients), and on a CPU vLLM's
LoRA path adds a gather of the whole adapter for every token it computes, prompts included.
Where inference and the trainer share the CPU's cores their work adds up; on separate GPUs an
async run overlaps them. The constants below are ratios of a run's work to the calibration's
products (how far a real step is from a clean matmul on the same machine), fitted by
benchmarks/estimates.py, a training step's on a CPU by benchmarks/trainer_throughput.py
(its products, attention and element-wise work apart, in both dtypes) and on a GPU by
benchmarks/gpu_suite.sh (the same script on two shapes, eager and compiled); a machine's own
speed is never in them."""

import math
from dataclasses import dataclass, field, replace

from rlcore.config.base import CPU_BLOCK_TOKENS
from rlcore.forecast.calibrate import DECODE_ROWS, Speeds
from rlcore.forecast.shape import ModelShape
from rlcore.host.machine import DTYPE_BYTES

GIB = 2**30
GPU_PRODUCT_EFFICIENCY = 0.23
"""On a GPU: share of the calibrated matmul rate a training step's products reach, the eager
element-wise work around them counted in (norms, activations, casts, the loss head's softmax:
memory-bound at a 1,024-wide model). Fitted with GPU_ATTENTION_EFFICIENCY on one H200's eager
steps of Qwen3-0.6B's shape, 8 x 2,048 and 1 x 16,384 tokens (forward + backward 0.36 and
0.60 s; benchmarks/gpu_suite.sh)."""
GPU_ATTENTION_EFFICIENCY = 0.85
"""On a GPU: share of the calibrated rate attention reaches, its FLOPs counted over the whole
context as on a CPU (the varlen and flash kernels skip the causal half: about 0.43 of the
rate on what they compute)."""
GPU_COMPILED = 0.68
"""On a GPU: a compiled forward + backward against the eager one (0.66 and 0.71 on the two
shapes above: torch.compile fuses the element-wise work)."""
GPU_TRAIN_STEP_OPS = 55_000
"""On a GPU: the trainer's work per step outside its kernels (the batch moved and packed, the
loss's bookkeeping, gradient clipping, the metrics read back), in tiny-op units of the host's
CPU (0.14-0.24 s on the H200 machine's host, whatever the samples)."""
CPU_PRODUCT_EFFICIENCY = 0.95
"""On a CPU: share of the dtype's calibrated matmul rate a training step's products reach
(profiled on the default model: aten::mm at 0.95 of it in bf16, 1.03 in fp32)."""
CPU_ATTENTION_EFFICIENCY = 0.55
"""On a CPU: share of the calibrated fp32 rate sdpa's attention reaches in forward + backward,
in any dtype (its CPU kernel computes in fp32). Profiled on the default model's packed rows of
100-512 tokens with the shared-prompt mask (aten's flash kernels, 20 steps of five batch
shapes): 1.27-1.56x the time 0.75 gave natively in bf16, 1.10-1.44x in fp32 under the AVX2 cap
(0.75 was read off one 1,024-token row)."""
CPU_ELEMENTWISE_BYTES = 1800.0
"""On a CPU: a training step's work besides its products and attention (norms, activation
functions, residual adds, autocast's casts, the loss head's softmax), per token, layer and
hidden unit, in bytes at the calibrated copy rate; about the same in any dtype (eager
element-wise kernels: a third of a bf16 step of the default model, a sixth of an fp32 one)."""
CPU_COMPILED = {"bfloat16": 0.9, "float32": 1.4}
"""On a CPU: a compiled training step against the eager one, per compute dtype: in bf16 0.85 on
a Zen 4 EPYC (the speed policy's figures, trainer/speed_policy.py: 40.7 against 47.6 s) and
0.93-0.96 on a Zen 5 EPYC (the 256-token job's batches replayed); in fp32 1.4 on the Zen 4
(63.8 against 45.0 s); 1 for a dtype not listed."""
COMPILE_IMPORTS = 18.0
"""A compiled trainer's first step: inductor traces each decoder layer and builds its kernels,
in units of the CPU time `import torch` measured (the host's CPU, on GPUs too). Measured with a
cold compile cache on this project's Zen 5 EPYC (import 1.03 s): the 256-token job's first step
19.6 s longer than its second, a replay of its batches 20.5 s (both with the eager first
step's own one-offs, `START_IMPORTS`)."""
COMPILE_CACHED_IMPORTS = 4.0
"""The same where the compile cache already holds compiled graphs (an earlier compile on this
machine): 3.6-4.1 s measured there."""
LORA_PRODUCT_EFFICIENCY = 0.3
"""On a CPU: share of the calibrated rate the adapters' thin products (rank x hidden) reach."""
TRAIN_OPS_PER_LAYER = 160
"""Tensor operations per layer and micro-batch in forward + backward (dispatch overhead)."""
ADAM_BYTES_PER_PARAM = 48
"""Memory traffic of one foreach AdamW update per trained parameter, fp32 (weights, gradient,
two moments, read and written, and the temporaries foreach makes)."""
DECODE_OPS_PER_LAYER = 40
"""Tensor operations per layer in one decode iteration of vLLM (dispatch overhead)."""
DECODE_ITERATION_OVERHEAD_OPS = 4000
"""A decode iteration's scheduling and sampling, in tiny-op units (Python per iteration)."""
LORA_OPS_PER_CALL = 12
"""Tiny ops of one shrink or expand of vLLM's CPU LoRA path (the gather, dtype casts, the
product, the scale and the add into the output); a projection calls both once per forward
(measured: 32 us a call at one row, 2.8 us a tiny op)."""
LORA_TRAIN_OPS = 16
"""Tensor operations an adapted projection adds per micro-batch in forward + backward (its two
products and their gradients, the scale, the add, the casts)."""
GENERATE_STEP_OPS = 100_000
"""The orchestrator's fixed work per step (requests, scoring, the batch written), in tiny-op
units: it sets the step of a tiny model."""
REQUEST_OPS = 1500
"""One request's work outside the model, in tiny-op units (the chat template, tokenizing,
HTTP, scheduling, detokenizing, scoring): 4 ms on a 2-CPU machine (measured with one-turn
steps of 32 and 128 rollouts run one phase at a time: 1.45 s and 5.1-5.2 s, where the model's
work and the step's fixed part came to 1.33 s and 4.53 s)."""
TRAIN_STEP_OPS = 100_000
"""On a CPU: the trainer's fixed work per step (the batch read, packing, logging), in tiny-op
units."""
TRAIN_SAMPLE_OPS = 6000
"""The trainer's work per sample of a step (its packing, masks and loss terms), in tiny-op
units (measured: 512 tokens as 32 samples took 0.23 s longer than as 16)."""
PUBLISH_COPIES = 60.0
"""On a CPU: a publish in units of a memory copy of the policy's bytes: gathered, cast, sent
over loopback (or written), loaded and repacked by inference (1.4 s for the quick start's
0.5 GB)."""
GPU_PUBLISH_COPIES = 1.0
"""On a GPU: a publish on the trainer's timeline, in host copies of the policy's bytes (each
tensor cast on the GPU and copied into pinned buffers; the write runs in the background:
0.04-0.23 s for Qwen3-0.6B's 1.2 GB on the H200 machine)."""
SHARED_CORES_CONTENTION = 1.25
"""Where generation and training run at once on the same CPU cores (an async run on a CPU),
their work adds up, and each process's threads then wait on the other's: the step is their sum
times this, until a finished run of a model of the same size measured the machine's own
(`Job.contention`, rlcore.forecast.contention). Between the machines measured: 1.07-1.40 on six
jobs on both ISAs of a Zen 4 EPYC (the quick start under the AVX2 cap, 0.97), 1.16 under the
AVX2 cap and 1.37-1.42 natively on a Zen 5 EPYC (what each kept over its runs)."""
START_IMPORTS = 13.0
"""An `rl` run's start (imports, vLLM's engine, the trainer's model and the environments) and
its first batch's and first step's one-off work (vLLM's first requests, the trainer's first
allocations: AdamW's moments, the first passes' buffers), in units of the CPU time `import
torch` measured. Measured on a Zen 4 EPYC, 32 runs natively and under the AVX2 cap (import
1.35 s): 11-13 s from `rl` to the first batch's generation (8-10 units), which then took 1-2 s
longer than estimated, and the first trainer step about 1 s longer than the next. On a Zen 5
EPYC (import 1.03 s): 9.2-9.8 s to the first batch's generation, 1.7-1.9 s more in it, and
the first trainer step 1.3-4.8 s longer than the next (each phase alone)."""
MODEL_INSPECTION_IMPORTS = 8.5
"""The start's more where vLLM has not yet inspected the model's class on this machine: it
does so once per architecture in a process of its own (importing vLLM there), and caches the
answer (`Job.inspects_model`). Measured on a Zen 5 EPYC (import 1.03 s), the quick start with
and without the cached answer: 28.1 s against 19.0 s from `rl` to the first step, the
inspection 9-10 s of inference's log against 1 s."""
SFT_START_IMPORTS = 7.5
"""The same for `rl sft` and `sft` (no inference, no orchestrator)."""
CHECKPOINT_COPIES = 40.0
"""The last checkpoint's write in units of a memory copy of its bytes (serialized, written,
synced)."""
END_IMPORTS = 1.5
"""Stopping the processes at the end, in `import torch` units."""
FIRST_STEP_EXTRA = 1.0
"""An evaluation's warm-up (kernels built, caches filled), in waves of its first environment's
rollouts (rlcore.forecast.evals). A run's is its first batch's generation (`warmup_s`)."""
LOAD_WEIGHT = 1.0
"""How much of a CPU each runnable thread of other programs takes from the run, for the
slowdown on a shared machine (`shared_slowdown`): a fair share, one CPU's worth each (on this
project's 2-CPU machines a load of 16 from others made the quick start's steps 9x longer)."""
WALL_RANGE = (0.8, 1.3)
"""The machine's share of the range printed around the wall time, applied to its ends."""
SHORT_ANSWERS = 0.2
"""The range's low end takes answers this share of `max_tokens` long (the longest too): how
long answers run is the job's largest unknown (a 256-token bound saw answers of about 40)."""
ANSWER_FILL = 0.75
"""Share of `max_tokens` an answer is taken to use (answers stop at EOS; the range covers
0.5-1)."""
PROMPT_TOKENS = 44
"""Prompt tokens per turn where the environment does not say (a chat template and a short
question)."""
INFERENCE_BASE = 0.85 * GIB
"""vLLM's processes on CPU besides the weights and KV cache (torch, vLLM, the API server;
proportional set sizes: the pages the engine core shares with the server it forked from count
once)."""
TRAINER_RESIDENT = 0.95
"""The trainer's measured peak (proportional set size) against the pre-flight estimate's terms
(rlcore/forecast/memory.py, which keeps its margin: `auto` activation checkpointing reads it)."""
ORCHESTRATOR_BASE = 0.25 * GIB
"""The orchestrator's process (verifiers, the tokenizer, the environments)."""
LAUNCHER_BASE = 0.08 * GIB
ARCHIVE_BYTES_PER_TOKEN = 5.0
"""The rollout archive's zstd Parquet bytes per token (text, logprob and mask per token)."""
ARCHIVE_BYTES_PER_ROLLOUT = 40.0
CHECKPOINT_FIXED = 64_000
"""A checkpoint's orchestrator part, configs and manifest."""
TOKENIZER_BYTES = 3.6e6
"""A policy folder's tokenizer and config files, where the model folder does not say."""
LOG_BYTES_PER_STEP = 1600.0
"""metrics.jsonl and the logs per step."""
LOG_BYTES_FIXED = 60_000.0
"""Configs, run.json, state files and the start of each log."""


@dataclass(frozen=True)
class TurnAnswers:
    """One turn of a step's rollouts, as generation sees it."""

    share: float
    """Share of the step's rollouts that reach this turn."""
    mean: float
    """The policy's tokens in an answer of this turn, on average."""
    longest: float
    """The longest answer of this turn in a step (the decode iterations it takes), tokens."""
    added: float = 0.0
    """Tokens the environment adds before this turn (its reply and the chat template's; 0 in
    the first turn, whose prompt is `Job.prompt_tokens`)."""


@dataclass(frozen=True)
class Job:
    """What the run does, as the estimate needs it (built from a config by the launcher)."""

    max_steps: int
    rollouts: int
    """Rollouts (samples) per step."""
    rollouts_per_example: int = 1
    prompt_tokens: int = PROMPT_TOKENS
    answer_tokens: int = 256
    """The bound on an answer per turn (`sampling.max_tokens`, at most `seq_len`)."""
    turns: float = 1.0
    max_turns: int = 1
    seq_len: int = 2048
    async_level: int = 1
    train_dtype: str = "float32"
    decode_dtype: str = "float32"
    """The dtype inference's products run in (the matmul dtype on CPU)."""
    served_bytes: int = 4
    """Bytes per served parameter."""
    served_dtype: str = "float32"
    """The dtype inference holds the weights in, and with them an adapter's (LoRA)."""
    trainable: int | None = None
    """Parameters that train when fewer than all do (LoRA)."""
    lora_targets: int = 0
    """Projections per layer that carry an adapter (LoRA's `target_modules`)."""
    adapter_served: bool = True
    """False for a LoRA run's first batches, which the base policy generates before the first
    adapter: vLLM then skips the adapter's prefill (its decode still gathers)."""
    micro_batch_tokens: int = 2048
    compiled: bool = False
    """The trainer compiles its layers (`model.compile`): its steps take GPU_COMPILED or
    CPU_COMPILED of an eager one's compute, its first step the compile (`compile_s`)."""
    compile_cached: bool = False
    """The compile cache already holds compiled graphs (COMPILE_CACHED_IMPORTS)."""
    pace: float = 1.0
    """An SFT or one-phase-after-the-other (`async_level` 0) run on a CPU: its step against
    its phases added up, as this machine's finished runs of the kind and the model's size
    measured it (rlcore.forecast.contention; a shared virtual machine's speed drifts from its
    cached calibration), else 1.0."""
    inspects_model: bool = False
    """vLLM inspects the model's class at its start (MODEL_INSPECTION_IMPORTS): not yet done on
    this machine (rlcore.forecast.report.vllm_inspects)."""
    recompute: float = 0.0
    """Share of the layers whose forward the backward runs again (activation checkpointing:
    1 for every layer, 1/n for every n-th; 0 off)."""
    row_attention: bool = False
    """The trainer's attention computes every token of a packed row against every other (sdpa
    or eager through a mask: the masked pairs are computed too), not each sample's own
    (rlcore.forecast.report.attends_whole_rows)."""
    contention: float = SHARED_CORES_CONTENTION
    """An async step on a CPU against its generation, training and publish added up: this
    machine's as its finished runs measured it (rlcore.forecast.contention), else the default."""
    max_concurrent: int = 32
    block_tokens: int = CPU_BLOCK_TOKENS
    """inference's KV-cache block (`vllm_args.block_size`): the prefix cache shares whole ones."""
    on_gpu: bool = False
    trainer_gpus: int = 0
    inference_gpus: int = 0
    gpu_memory_bytes: float = 0.0
    """The smallest GPU's memory, 0 on CPU."""
    kv_cache_bytes: float = 0.0
    """Inference's KV cache on CPU (`cpu.kvcache_space_gib`), or its share of a GPU."""
    inference_replicas: int = 1
    checkpoints_kept: int = 1
    """Complete checkpoints in the folder at the end."""
    checkpoints_saved: int = 1
    policy_folders: int = 0
    """weights/step_<n> folders left at the end (0 with the collective transport)."""
    archive: bool = True
    archive_bound: float = math.inf
    """Bytes the rollout archive may take (`samples.max_gib`, else a share of the free space):
    past it the orchestrator deletes the oldest steps' files."""
    sft: bool = False
    """Supervised fine-tuning: no inference, no orchestrator; `rollouts` are the batch's
    samples and `answer_tokens` their length."""
    validation_tokens: float = 0.0
    """Tokens the run's validations forward, all of them together (an SFT run's `[val]`: its
    examples' tokens times how often it runs)."""
    trainer_peak: float = 0.0
    """The trainer's peak memory in bytes (rlcore.forecast.memory), computed by the caller."""
    tokenizer_bytes: float = TOKENIZER_BYTES
    """A policy folder's files besides its weights (tokenizer, config)."""
    answer_fill: float = ANSWER_FILL
    """Share of `answer_tokens` an answer uses on average (1: `answer_tokens` is a mean)."""
    answers: tuple[TurnAnswers, ...] = ()
    """The answers an earlier run of the same model, environments and sampling measured, turn
    by turn (rlcore.forecast.answers); empty: `turns` turns of `answer_mean`-token answers, the
    longest `answer_tokens` (`turn_answers`)."""

    @property
    def answer_mean(self) -> float:
        return self.answer_tokens * self.answer_fill

    @property
    def groups(self) -> int:
        return max(self.rollouts // max(self.rollouts_per_example, 1), 1)


@dataclass
class Forecast:
    """The estimate: seconds, bytes, GPU-hours; `basis` says what it rests on."""

    phases: dict[str, float]
    """Seconds per step: generate, wait, train, publish."""
    step_s: float
    start_s: float
    end_s: float
    wall_s: float
    wall_range: tuple[float, float]
    memory: dict[str, float]
    """Peak bytes per process (trainer, inference, orchestrator)."""
    machine_memory: float
    """Bytes of the machine's memory in all at the peak (all processes, on GPUs host memory)."""
    gpu_memory: dict[str, float] = field(default_factory=dict)
    """Peak bytes per GPU by its process (on GPUs)."""
    disk: dict[str, float] = field(default_factory=dict)
    gpu_hours: float = 0.0
    basis: list[str] = field(default_factory=list)
    speeds: Speeds | None = None
    """The machine's measured speed it rests on; a new measurement is cached only once the run
    starts (`rlcore.forecast.report.keep_measurement`)."""
    warmup_s: float = 0.0
    """The first batch's generation, part of `start_s` (`warmup_s`)."""
    compile_s: float = 0.0
    """The compile in the trainer's first step, part of `wall_s` (`compile_s`; 0 eager)."""
    disk_fullest: float = 0.0
    """Bytes the run folder holds at its fullest: `disk` with one checkpoint more, written while
    the newest kept is still there (what `rl sft` checks against the free space before it
    starts; `rl` adds its policy folders: launcher.prepare.disk_need)."""
    untrained_batches: int = 0
    """Batches generated before the first needs a trained policy (`async_level + 1`; 0 in SFT):
    they follow each other without a wait, so the measured pace skips them."""
    answers_key: str = ""
    """The job's key for its measured answers (rlcore.forecast.answers): the run keeps its own
    under it when it ends; empty where none are kept (SFT, an evaluation)."""
    answers_bound: int = 0
    """The job's bound on an answer (`max_tokens`), which the answers it keeps respect."""
    answers_seq_len: int = 0
    """The job's `seq_len`, the bound on the environment's tokens in the answers it keeps."""
    contention_key: str = ""
    """The machine's calibration fingerprint and the model's size (rlcore.forecast.contention
    `key`), under which an async run on a CPU keeps its measured contention when it ends;
    empty elsewhere."""

    @property
    def disk_total(self) -> float:
        return sum(self.disk.values())

    def record(self) -> dict:
        """What run.json keeps (`estimate`)."""
        return {
            "phases_s": {k: round(v, 3) for k, v in self.phases.items()},
            "step_s": round(self.step_s, 3),
            "start_s": round(self.start_s, 2),
            "end_s": round(self.end_s, 2),
            "wall_s": round(self.wall_s, 1),
            "wall_range_s": [round(x, 1) for x in self.wall_range],
            "warmup_s": round(self.warmup_s, 2),
            "compile_s": round(self.compile_s, 2),
            "untrained_batches": self.untrained_batches,
            "memory_bytes": {k: int(v) for k, v in self.memory.items()},
            "machine_memory_bytes": int(self.machine_memory),
            "gpu_memory_bytes": {k: int(v) for k, v in self.gpu_memory.items()},
            "disk_bytes": {k: int(v) for k, v in self.disk.items()},
            "gpu_hours": round(self.gpu_hours, 4),
            "basis": self.basis,
        }


# -- FLOPs and bytes -------------------------------------------------------------------------
def forward_flops(shape: ModelShape, tokens: float, context: float = 0.0) -> float:
    """A forward pass over `tokens` tokens: 2 x matmul parameters per token, plus attention
    (scores and values: 4 x layers x the queries' width x context per token)."""
    attention = 4 * shape.layers * shape.query_width * context
    return tokens * (2 * shape.matmul_params + attention)


def product_flops(job: Job, shape: ModelShape, tokens: float, loss_tokens: float | None) -> float:
    """A training step's products, forward + backward: each layer's 3x a forward's (2x where
    only adapters train: no weight gradients of the frozen matrices). The output head runs only
    at the `loss_tokens` positions the loss uses (trainer/logprob_head.py), where its backward
    computes the logits again: 4x a forward's there (3x frozen); with `loss_tokens` None (SFT,
    validations) it counts as a layer's at every token."""
    passes = 2.0 if job.trainable is not None else 3.0
    if loss_tokens is None:
        return passes * 2 * shape.matmul_params * tokens
    head = shape.vocab * shape.hidden
    body = passes * 2 * (shape.matmul_params - head) * tokens
    return body + (passes + 1) * 2 * head * loss_tokens


def policy_tokens(job: Job, answer: float) -> float:
    """Tokens of a step the loss uses: every rollout's answers, turn by turn (not the prompt,
    not what the environment adds between turns)."""
    return job.rollouts * sum(t.share * t.mean for t in turn_answers(job, answer))


def train_flops(shape: ModelShape, tokens: float, context: float, lora: bool) -> float:
    """Forward + backward: 3x a forward (2x for the backward's two products), 2x where only
    adapters train (no weight gradients of the frozen matrices)."""
    return (2.0 if lora else 3.0) * forward_flops(shape, tokens, context)


def train_tokens(job: Job, answer: float) -> float:
    """Tokens a step trains on: each group's prompt once (shared prompts) and every rollout's
    completion (in a multi-turn job every turn's answer and the environment's tokens between
    them, masked but computed: `completion_tokens`)."""
    return job.groups * job.prompt_tokens + job.rollouts * completion_tokens(job, answer)


def prefill_tokens(job: Job) -> float:
    """Prompt tokens a turn computes: a group's rollouts share their prompt's whole KV blocks
    through the prefix cache (computed once a group); each rollout computes the rest of it (a
    44-token prompt in 128-token blocks: all of it; measured prefix-cache hit rate 0%)."""
    shared = job.prompt_tokens // max(job.block_tokens, 1) * job.block_tokens
    return job.groups * shared + job.rollouts * (job.prompt_tokens - shared)


# -- time ------------------------------------------------------------------------------------
def dtype_rate(rates: dict[str, float], dtype: str) -> float:
    """The calibrated rate in `dtype`, else the slowest measured."""
    return rates.get(dtype) or min(rates.values())


def turn_answers(job: Job, answer: float) -> tuple[TurnAnswers, ...]:
    """The job's answers turn by turn: measured by an earlier run (`Job.answers`), else every
    one of `turns` reached by every rollout, answers of `answer` tokens on average, the longest
    `answer_tokens` long, and before each later turn the environment adding a prompt's worth."""
    if job.answers:
        return job.answers
    return tuple(
        TurnAnswers(1.0, answer, float(job.answer_tokens), 0.0 if turn == 0 else job.prompt_tokens)
        for turn in range(max(round(job.turns), 1))
    )


def completion_tokens(job: Job, answer: float) -> float:
    """A rollout's tokens after its prompt: every turn's answer and what the environment adds
    before it, weighted by the rollouts that reach the turn."""
    return sum(t.share * (t.mean + t.added) for t in turn_answers(job, answer))


def generate_s(job: Job, shape: ModelShape, speeds: Speeds, answer: float) -> float:
    """One step's generation, turn by turn (`turn_answers`): the turn's tokens prefilled but
    those the prefix cache holds, then its decode (`decode_s`) and each request's own work
    (REQUEST_OPS); and the step's fixed work. The cache holds whole KV blocks only: of the
    first turn's prompts a group's (`prefill_tokens`), of a later turn's context the previous
    request's (vLLM's default 128-token blocks on a CPU hold none of a short conversation)."""
    dtype = job.decode_dtype
    flops = dtype_rate(speeds.matmul_flops, dtype)
    block = max(job.block_tokens, 1)
    total, context, previous = 0.0, float(job.prompt_tokens), 0.0
    for index, turn in enumerate(turn_answers(job, answer)):
        active = job.rollouts * turn.share
        if index == 0:
            new = prefill_tokens(job)
        else:  # the context grown by the previous answer and the environment's reply
            cached = (context + previous) // block * block
            context += previous + turn.added
            new = active * (context - cached)
        total += forward_flops(shape, new, context) / flops
        total += decode_s(job, shape, speeds, turn, context)
        total += REQUEST_OPS * speeds.op_s * active
        previous = turn.mean
    return total + lora_generate_s(job, shape, speeds, answer) + GENERATE_STEP_OPS * speeds.op_s


def decode_s(
    job: Job, shape: ModelShape, speeds: Speeds, turn: TurnAnswers, context: float
) -> float:
    """One turn's decode on `job.rollouts * turn.share` rollouts in waves of `max_concurrent`
    (fewer where the KV cache holds fewer: `kv_sequences`): each iteration streams the weights
    once (the decode product at one row, `stream_one_bytes`) and pays vLLM's ops, and a wave
    iterates until its longest answer ends; each answer token adds its row's share of the
    product at DECODE_ROWS rows beyond one (`stream_bytes`) and its attention over the context
    so far."""
    dtype = job.decode_dtype
    flops = dtype_rate(speeds.matmul_flops, dtype)
    stream = dtype_rate(speeds.stream_bytes, dtype)
    one_row = speeds.stream_one_bytes.get(dtype) or stream  # an older record: no row's share
    active = job.rollouts * turn.share
    if active <= 0:
        return 0.0
    concurrent = max(min(active, job.max_concurrent, kv_sequences(job, shape, context, turn)), 1)
    waves = math.ceil(active / concurrent - 1e-9)
    weight_bytes = shape.matmul_params * DTYPE_BYTES.get(dtype, 4)
    fixed = weight_bytes / one_row
    fixed += (DECODE_OPS_PER_LAYER * shape.layers + DECODE_ITERATION_OVERHEAD_OPS) * speeds.op_s
    per_row = max(weight_bytes / stream - weight_bytes / one_row, 0.0) / DECODE_ROWS
    position = context + turn.mean / 2  # attention beyond the products the stream rate covers
    per_row += (forward_flops(shape, 1, position) - 2 * shape.matmul_params) / flops
    tokens = active * turn.mean
    iterations = max(waves * turn.longest, tokens / concurrent)
    return iterations * fixed + tokens * per_row


def kv_sequences(job: Job, shape: ModelShape, context: float, turn: TurnAnswers) -> float:
    """Rollouts of a turn the KV cache holds at once: its blocks (`kv_cache_bytes` in blocks of
    `block_tokens`, each token `layers` x `kv_width` elements in the served dtype) over the
    blocks one takes at its longest; vLLM keeps the rest waiting (the quick start's 0.125 GiB,
    91 blocks of 32 tokens, holds 22 of a 2-turn job's second-turn rollouts of 115 tokens: with
    this bound that job's generation is estimated 3.87 s, 2.70 without it, and took 3.94-4.82 s
    measured alone). Unbounded where the cache or a token's size is not known (a GPU's)."""
    block = max(job.block_tokens, 1)
    per_block = shape.layers * shape.kv_width * job.served_bytes * block
    if job.kv_cache_bytes <= 0 or per_block <= 0:
        return math.inf
    per_rollout = math.ceil((context + turn.longest) / block - 1e-9)
    return max(job.kv_cache_bytes // per_block // max(per_rollout, 1), 1.0)


def lora_generate_s(job: Job, shape: ModelShape, speeds: Speeds, answer: float) -> float:
    """What serving an adapter adds to a step's generation on a CPU: vLLM's LoRA path copies the
    whole adapter (`trainable` parameters in the served dtype) for every token it computes,
    then multiplies it batched (Speeds.lora_bytes): each prompt token computed
    (`prefill_tokens`) at the prefill rate, each answer token at the decode rate; and every
    decode iteration calls a shrink and an expand per adapted projection. Nothing on a GPU,
    whose kernels are others."""
    if job.trainable is None or job.on_gpu or not speeds.lora_bytes:
        return 0.0
    dtype = job.served_dtype
    decode_rate = dtype_rate(speeds.lora_bytes, dtype)
    prefill_rate = speeds.lora_prefill_bytes.get(dtype) or min(
        speeds.lora_prefill_bytes.values(), default=decode_rate
    )
    adapter_bytes = job.trainable * DTYPE_BYTES.get(dtype, 4)
    turns = turn_answers(job, answer)
    later = sum(
        job.rollouts * turn.share * (before.mean + turn.added)
        for before, turn in zip(turns, turns[1:], strict=False)
    )
    prefill_rows = prefill_tokens(job) + later if job.adapter_served else 0.0
    decode_rows = job.rollouts * sum(t.share * t.mean for t in turns)
    iterations = 0.0
    for turn in turns:
        active = job.rollouts * turn.share
        concurrent = max(min(active, job.max_concurrent), 1.0)
        iterations += math.ceil(active / concurrent - 1e-9) * turn.longest
    calls = iterations * shape.layers * job.lora_targets * 2
    return (
        prefill_rows * adapter_bytes / prefill_rate
        + decode_rows * adapter_bytes / decode_rate
        + calls * LORA_OPS_PER_CALL * speeds.op_s
    )


def train_parts(job: Job, shape: ModelShape, speeds: Speeds, answer: float) -> dict[str, float]:
    """One optimizer step's seconds by part: forward + backward (`cpu_train_compute_s` on a
    CPU, `gpu_train_compute_s` split over the shards on GPUs; with `Job.recompute` the
    checkpointed layers' forward again), dispatch overhead per layer and micro-batch, AdamW's
    memory traffic (at the GPU's copy rate on GPUs) and the fixed work per step (and per
    sample on a CPU). Attention spans a sample's tokens, or with `Job.row_attention` its whole
    packed row (a micro-batch)."""
    shards = max(job.trainer_gpus, 1)
    tokens = train_tokens(job, answer)
    micro_batches = max(math.ceil(tokens / shards / max(job.micro_batch_tokens, 1)), 1)
    context = job.prompt_tokens + completion_tokens(job, answer)
    if job.row_attention:
        context = tokens / shards / micro_batches
    lora = job.trainable is not None
    loss = None if job.sft else policy_tokens(job, answer)
    if job.on_gpu:
        compute = gpu_train_compute_s(job, shape, speeds, tokens, context, loss) / shards
    else:
        compute = cpu_train_compute_s(job, shape, speeds, tokens, context, loss)
    compute *= 1 + job.recompute / (2.0 if lora else 3.0)  # a forward again, of 3 (2 with LoRA)
    dispatch = TRAIN_OPS_PER_LAYER * shape.layers * micro_batches * speeds.op_s
    trained = shape.params if job.trainable is None else job.trainable
    memory = speeds.device_copy_bytes if job.on_gpu else 0.0  # AdamW runs where the weights are
    optimizer = ADAM_BYTES_PER_PARAM * trained / shards / (memory or speeds.copy_bytes)
    adapters = lora_train_s(job, shape, speeds, tokens, micro_batches)
    fixed = (TRAIN_STEP_OPS + TRAIN_SAMPLE_OPS * job.rollouts / shards) * speeds.op_s
    if job.on_gpu:
        fixed = GPU_TRAIN_STEP_OPS * speeds.op_s
    return {
        "compute": compute,
        "dispatch": dispatch,
        "optimizer": optimizer,
        "adapters": adapters,
        "fixed": fixed,
    }


def train_s(job: Job, shape: ModelShape, speeds: Speeds, answer: float) -> float:
    """One optimizer step (`train_parts`)."""
    return sum(train_parts(job, shape, speeds, answer).values())


def gpu_train_compute_s(
    job: Job,
    shape: ModelShape,
    speeds: Speeds,
    tokens: float,
    context: float,
    loss_tokens: float | None = None,
) -> float:
    """A GPU's forward + backward: the products (`product_flops`) at GPU_PRODUCT_EFFICIENCY of
    the dtype's calibrated rate, attention (3x a forward's) at GPU_ATTENTION_EFFICIENCY, both
    times GPU_COMPILED where the trainer compiles."""
    rate = dtype_rate(speeds.matmul_flops, job.train_dtype)
    products = product_flops(job, shape, tokens, loss_tokens)
    attention = 3 * (forward_flops(shape, tokens, context) - 2 * shape.matmul_params * tokens)
    compute = products / (rate * GPU_PRODUCT_EFFICIENCY) + attention / (
        rate * GPU_ATTENTION_EFFICIENCY
    )
    return compute * (GPU_COMPILED if job.compiled else 1.0)


def cpu_train_compute_s(
    job: Job,
    shape: ModelShape,
    speeds: Speeds,
    tokens: float,
    context: float,
    loss_tokens: float | None = None,
) -> float:
    """A CPU's forward + backward as its profile splits it: the products (`product_flops`) at
    CPU_PRODUCT_EFFICIENCY of the dtype's calibrated rate; attention, 3x a forward's whether or
    not the base is frozen (the adapters below it need its input gradients), at
    CPU_ATTENTION_EFFICIENCY of the fp32 rate (the dtype's where fp32 was not measured); and
    the element-wise rest at the copy rate."""
    rate = dtype_rate(speeds.matmul_flops, job.train_dtype)
    fp32 = speeds.matmul_flops.get("float32") or rate
    products = product_flops(job, shape, tokens, loss_tokens) / (rate * CPU_PRODUCT_EFFICIENCY)
    attention = 3 * (forward_flops(shape, tokens, context) - 2 * shape.matmul_params * tokens)
    elementwise = tokens * shape.layers * shape.hidden * CPU_ELEMENTWISE_BYTES
    compute = (
        products + attention / (fp32 * CPU_ATTENTION_EFFICIENCY) + elementwise / speeds.copy_bytes
    )
    return compute * (CPU_COMPILED.get(job.train_dtype, 1.0) if job.compiled else 1.0)


def lora_train_s(
    job: Job, shape: ModelShape, speeds: Speeds, tokens: float, micro_batches: int
) -> float:
    """The adapters' own work in a training step (the frozen base's is in `train_s`): their
    products, 2 x `trainable` FLOPs a token forward and twice that backward (the input's and
    the adapter's gradients), at LORA_PRODUCT_EFFICIENCY of the calibrated rate on a CPU
    (GPU_PRODUCT_EFFICIENCY on GPUs), and LORA_TRAIN_OPS per adapted projection and micro-batch."""
    if job.trainable is None:
        return 0.0
    efficiency = GPU_PRODUCT_EFFICIENCY if job.on_gpu else LORA_PRODUCT_EFFICIENCY
    rate = dtype_rate(speeds.matmul_flops, job.train_dtype) * efficiency
    shards = max(job.trainer_gpus, 1)
    compute = 6 * job.trainable * tokens / rate / shards
    ops = LORA_TRAIN_OPS * shape.layers * job.lora_targets * micro_batches
    return compute + ops * speeds.op_s


def publish_s(job: Job, shape: ModelShape, speeds: Speeds) -> float:
    """The new policy to inference: its bytes copied PUBLISH_COPIES times on a CPU,
    GPU_PUBLISH_COPIES on GPUs (adapters alone with LoRA)."""
    if job.sft:
        return 0.0
    params = shape.params if job.trainable is None else job.trainable
    copies = GPU_PUBLISH_COPIES if job.on_gpu else PUBLISH_COPIES
    return copies * params * job.served_bytes / speeds.copy_bytes


def validation_s(job: Job, shape: ModelShape, speeds: Speeds) -> float:
    """The run's validations, all together: a forward over `validation_tokens`, a third of a
    training step's forward and backward over as many tokens (no gradients, no optimizer)."""
    tokens = job.validation_tokens
    if tokens <= 0:
        return 0.0
    full = replace(job, trainable=None)  # a forward through adapters is the base's
    context = job.prompt_tokens + completion_tokens(job, job.answer_mean)
    if job.on_gpu:
        return gpu_train_compute_s(full, shape, speeds, tokens, context) / 3
    return cpu_train_compute_s(full, shape, speeds, tokens, context) / 3


def step_phases(job: Job, shape: ModelShape, speeds: Speeds, answer: float) -> dict[str, float]:
    """Seconds per step by phase, and the step itself (`step`)."""
    train = train_s(job, shape, speeds, answer)
    if job.sft:  # the validations spread over the steps, as the measured pace spreads them
        validate = validation_s(job, shape, speeds) / max(job.max_steps, 1)
        phases = {"generate": 0.0, "wait": 0.0, "train": train, "publish": 0.0}
        return phases | {"validate": validate, "step": job.pace * (train + validate)}
    generate = generate_s(job, shape, speeds, answer)
    publish = publish_s(job, shape, speeds)
    trainer_side = train + publish
    if job.async_level == 0:
        step = job.pace * (generate + trainer_side)
    elif job.on_gpu:
        step = max(generate, trainer_side)
    else:  # one set of cores: both at once take longer than one after the other
        step = job.contention * (generate + trainer_side)
    return {
        "generate": generate,
        "wait": max(step - generate, 0.0),
        "train": train,
        "publish": publish,
        "step": step,
    }


def start_s(job: Job, shape: ModelShape, speeds: Speeds) -> float:
    """From `rl` to the first step: imports and vLLM's engine (in import units), loading the
    weights, and the first step's warm-up (added by the caller)."""
    load = shape.params * 4 / speeds.copy_bytes * 4
    imports = SFT_START_IMPORTS if job.sft else START_IMPORTS
    if job.inspects_model and not job.sft:
        imports += MODEL_INSPECTION_IMPORTS
    return imports * speeds.import_s + load


def compile_s(job: Job, speeds: Speeds) -> float:
    """The compile in a compiled trainer's first step (COMPILE_IMPORTS, COMPILE_CACHED_IMPORTS
    from a warm cache); 0 eager."""
    if not job.compiled:
        return 0.0
    return (COMPILE_CACHED_IMPORTS if job.compile_cached else COMPILE_IMPORTS) * speeds.import_s


def end_s(job: Job, shape: ModelShape, speeds: Speeds) -> float:
    """The last checkpoint's write and the processes' stop."""
    write = checkpoint_bytes(job, shape) / speeds.copy_bytes * CHECKPOINT_COPIES
    return (write if job.checkpoints_saved else 0.0) + END_IMPORTS * speeds.import_s


# -- memory and disk -------------------------------------------------------------------------
def inference_memory(job: Job, shape: ModelShape) -> float:
    """Inference's peak: served weights, on a CPU oneDNN's packed copy of every linear layer in
    the dtype its products run in, the KV cache and vLLM's own processes."""
    if job.sft:
        return 0.0
    weights = shape.params * job.served_bytes
    copy = 0.0 if job.on_gpu else shape.matmul_params * DTYPE_BYTES.get(job.decode_dtype, 4)
    # the KV cache is held whole from the start (measured: a LoRA run's 2 GiB and the tiny
    # model's 1 GiB, whatever the tokens the run wrote into them)
    return (weights + copy + job.kv_cache_bytes + INFERENCE_BASE) * job.inference_replicas


def checkpoint_bytes(job: Job, shape: ModelShape) -> float:
    """One checkpoint: fp32 weights (adapters alone with LoRA) and two fp32 AdamW moments of
    what trains (a tied embedding's weights are saved under both names), plus the
    orchestrator's and the configs' small part."""
    if job.trainable is not None:
        return 12 * job.trainable + CHECKPOINT_FIXED
    tied = 4 * shape.vocab * shape.hidden if shape.tied else 0
    return 12 * shape.params + tied + CHECKPOINT_FIXED


def disk(job: Job, shape: ModelShape, answer: float) -> dict[str, float]:
    """The run folder at the end, by part."""
    rollout_tokens = job.prompt_tokens + completion_tokens(job, answer)
    per_step = job.rollouts * (rollout_tokens * ARCHIVE_BYTES_PER_TOKEN + ARCHIVE_BYTES_PER_ROLLOUT)
    policy: float = shape.params * job.served_bytes if job.trainable is None else 4 * job.trainable
    policy += job.tokenizer_bytes
    return {
        "checkpoints": job.checkpoints_kept * checkpoint_bytes(job, shape),
        "weights": job.policy_folders * policy,
        "rollout archive": min(per_step * job.max_steps, job.archive_bound)
        if job.archive and not job.sft
        else 0.0,
        "logs": LOG_BYTES_FIXED + LOG_BYTES_PER_STEP * job.max_steps,
    }


def shared_slowdown(other_load: float, cpus: int) -> float:
    """How much longer CPU work takes while other programs keep `other_load` threads runnable
    on `cpus` CPUs (1 on a quiet machine)."""
    return 1.0 + LOAD_WEIGHT * max(other_load, 0.0) / max(cpus, 1)


def stretched_phases(
    job: Job, shape: ModelShape, speeds: Speeds, slowdown: float
) -> dict[str, float]:
    """`step_phases` at the mean answer, CPU work stretched by `slowdown` (on GPUs none)."""
    phases = step_phases(job, shape, speeds, job.answer_mean)
    return phases if job.on_gpu else {k: v * slowdown for k, v in phases.items()}


def run_times(
    job: Job, shape: ModelShape, speeds: Speeds, slowdown: float
) -> tuple[dict[str, float], float, float, float]:
    """(a step's phases, start, end, wall). The start holds the first batch's generation
    (`warmup_s`). Each step then trains on one batch while the next is generated, but the
    last, whose batch was generated during the step before: it trains and publishes alone
    (measured: 3.3 s where a LoRA run's other steps took 16 to 24). A LoRA run's steps up to
    batch `async_level` take the base policy's step (no adapter served yet; batch 0 is the
    warm-up's). A compiled trainer's first step adds the compile (`compile_s`)."""
    mid = stretched_phases(job, shape, speeds, slowdown)
    steps = max(job.max_steps, 1)
    first, base_steps = mid["step"], 0
    if job.trainable is not None:
        base = replace(job, adapter_served=False)
        first = stretched_phases(base, shape, speeds, slowdown)["step"]
        base_steps = min(job.async_level, steps - 1)
    last = mid["step"] if job.sft else mid["train"] + mid["publish"]
    start = start_s(job, shape, speeds) * slowdown + warmup_s(job, shape, speeds, slowdown)
    end = end_s(job, shape, speeds)
    wall = start + base_steps * first + (steps - 1 - base_steps) * mid["step"] + last + end
    wall += compile_s(job, speeds) * slowdown
    return mid, start, end, wall


def warmup_s(job: Job, shape: ModelShape, speeds: Speeds, slowdown: float) -> float:
    """The first batch's generation (part of `run_times`' start), by the base policy: the
    trainer has nothing to train until it is done, while every later step hides the next
    batch's generation behind its training as far as the cores allow (`step_phases`). None
    in an SFT run, which generates nothing. (Measured on this project's EPYC, 14 runs: the
    first trainer step ends after the imports, this generation and one step.)"""
    base = replace(job, adapter_served=False) if job.trainable is not None else job
    return stretched_phases(base, shape, speeds, slowdown)["generate"]


def wall_with_answers(
    job: Job, shape: ModelShape, speeds: Speeds, slowdown: float, share: float
) -> float:
    """The wall time were every answer `share` of `answer_tokens` long (answers an earlier run
    measured, and an SFT job's samples, are taken as they are: unchanged)."""
    if not job.sft and not job.answers:
        job = replace(job, answer_tokens=max(round(job.answer_tokens * share), 1), answer_fill=1.0)
    return run_times(job, shape, speeds, slowdown)[3]


def estimate(job: Job, shape: ModelShape, speeds: Speeds, slowdown: float = 1.0) -> Forecast:
    """The whole estimate for `job` on this machine; `slowdown` stretches the CPU's work on a
    shared machine (`shared_slowdown`; on GPUs only the start)."""
    mid, start, end, wall = run_times(job, shape, speeds, slowdown)
    wall_range = (
        WALL_RANGE[0] * wall_with_answers(job, shape, speeds, slowdown, SHORT_ANSWERS),
        WALL_RANGE[1] * wall_with_answers(job, shape, speeds, slowdown, 1.0),
    )
    memory = {"trainer": job.trainer_peak}
    if not job.sft:
        memory["inference"] = inference_memory(job, shape)
        memory["orchestrator"] = ORCHESTRATOR_BASE
    gpu_memory: dict[str, float] = {}
    if job.on_gpu:
        gpu_memory = {"trainer": job.trainer_peak}
        if not job.sft:
            gpu_memory["inference"] = job.gpu_memory_bytes * 0.9
        host = LAUNCHER_BASE + ORCHESTRATOR_BASE + 2 * 0.3 * GIB
        memory = {k: v for k, v in memory.items()}
    else:
        host = LAUNCHER_BASE + sum(memory.values())
    gpus = job.trainer_gpus + (0 if job.sft else job.inference_gpus)
    return Forecast(
        phases={k: v for k, v in mid.items() if k != "step"},
        step_s=mid["step"],
        start_s=start,
        end_s=end,
        wall_s=wall,
        wall_range=wall_range,
        memory=memory,
        machine_memory=host,
        gpu_memory=gpu_memory,
        disk=disk(job, shape, job.answer_mean),
        gpu_hours=gpus * wall / 3600,
        warmup_s=warmup_s(job, shape, speeds, slowdown),
        compile_s=compile_s(job, speeds) * slowdown,
        disk_fullest=sum(disk(fullest(job), shape, job.answer_mean).values()),
        untrained_batches=0 if job.sft else job.async_level + 1,
    )


def fullest(job: Job) -> Job:
    """`job` at the moment its run folder is fullest: a new checkpoint being written while the
    newest kept is still there."""
    return replace(job, checkpoints_kept=min(job.checkpoints_saved, job.checkpoints_kept + 1))
