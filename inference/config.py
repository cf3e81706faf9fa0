"""Inference config schema (pydantic and the standard library only)."""

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat, model_validator

from rlcore.config.base import (
    CPU_KVCACHE_SPACE_GIB,
    DEFAULT_RUN_DIR,
    BaseConfig,
    FilesystemTransferConfig,
    LogConfig,
    ModelConfig,
    PositiveInt,
    UserPath,
    WeightTransferConfig,
    note_renamed,
)

# vLLM arguments that come from this config's own keys, so vllm_args must not set them.
OWNED_VLLM_ARGS = {
    "model": "model.name",
    "served_model_name": "model.name",
    "dtype": "model.dtype",
    "max_model_len": "model.max_model_len",
    "host": "server.host",
    "port": "server.port",
    "tensor_parallel_size": "parallel.tp",
    "data_parallel_size": "parallel.dp",
    "enforce_eager": "enforce_eager",
    "trust_remote_code": "model.trust_remote_code",
    "seed": "seed",
    "enable_lora": "lora",
    "max_lora_rank": "lora.max_rank",
    "max_loras": "lora.max_loras",
}

# The adapter ranks vLLM's --max-lora-rank accepts.
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class InferenceModelConfig(ModelConfig):
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = "auto"
    """Dtype of the served weights. `auto`: bf16 on GPUs; float32 on a CPU (the trainer's fp32
    master weights arrive whole, and `cpu.matmul_dtype` says what the linear layers compute
    in). An explicit bfloat16 on a CPU without native bf16 is served, slowly, with a warning."""

    max_model_len: PositiveInt | None = None
    """Longest sequence (prompt + completion) the server accepts; None uses the model's."""

    enforce_eager: bool | None = None
    """prime-rl's place for the top-level `enforce_eager` (read as that key)."""


class ParallelConfig(BaseConfig):
    dp: PositiveInt | None = None
    """Data-parallel engine replicas; None derives it from the GPU count and `tp`."""

    tp: PositiveInt = 1
    """Tensor-parallel GPUs per replica."""


class ServerConfig(BaseConfig):
    host: str = "127.0.0.1"
    """Address to bind; use 0.0.0.0 only on a trusted network."""

    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    """TCP port of the OpenAI-compatible server. None: 8000 for `inference` started alone;
    under `rl` (and `evals`' own server) 8000 when it is free, else the next free port above
    it, reserved for the run from its checks on (several replicas: that many in a row) and
    recorded in run.json. A port given is used as given, and refused at once when taken."""

    startup_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    """Seconds the server may take to load the model and answer /health; past it, the
    server stops itself (exit 1) and the launcher gives up waiting."""


class CpuConfig(BaseConfig):
    kvcache_space_gib: PositiveFloat = CPU_KVCACHE_SPACE_GIB
    """KV-cache memory in GiB when serving on CPU, fractions allowed (vLLM allocates all of it
    at start); a VLLM_CPU_KVCACHE_SPACE environment variable (whole GiB) wins over it. A request
    holds whole blocks (128 tokens on CPU unless vllm_args.block_size says otherwise), and one
    too small for a request of model.max_model_len is refused before vLLM starts."""

    omp_threads_bind: str = "auto"
    """CPU cores for vLLM's OpenMP threads, e.g. `0-1`; `auto` lets vLLM pick (sets
    VLLM_CPU_OMP_THREADS_BIND unless that environment variable is already set)."""

    start_method: Literal["fork", "spawn"] = "fork"
    """How vLLM starts its engine core and worker processes on CPU. `fork` shares this
    process's imports with them (ready in about half the time, 0.8 GiB less memory on the
    quick start) and pins the worker's OpenMP threads as vLLM's own `spawn` would."""

    matmul_dtype: Literal["auto", "model", "bfloat16"] = "auto"
    """What the linear layers (the tied head included) compute in when `model.dtype` is
    float32: `bfloat16` multiplies bf16-rounded inputs by a bf16 copy of each weight, as the
    trainer's bf16 autocast forward does (the same bits per layer, about 1.5x faster, half the
    packed weights' memory), while the embedding, norms, attention and KV cache stay fp32 (on
    the quick start the mismatch with the trainer's logprobs is 1.3e-3 instead of 0.8e-3);
    `model` computes in `model.dtype`, as vLLM does. `auto`: under `rl` the trainer's compute
    dtype (`trainer.model.dtype`), alone `bfloat16` where this CPU has native bf16
    (AVX512_BF16, AMX) and `model` elsewhere (rlcore/host/machine.py). `bfloat16` on a CPU that
    oneDNN cannot build it for (AVX2 without AVX-512) is refused before vLLM starts. CPU only
    (inference/cpu_matmul.py)."""

    separate_worker: bool = False
    """With `start_method = "fork"`: run vLLM's model worker in a process of its own beside the
    engine core, as vLLM's CPU platform does, instead of inside the engine core's process (one
    worker: no tensor, pipeline or data parallelism). Inside, no process passes each step's
    inputs and outputs to another or polls for them: on the quick start's two cores each step
    took 8.0 s instead of 10.7 (generation and the trainer beside it both gained)."""


class WeightsConfig(BaseConfig):
    pause_mode: Literal["wait", "keep", "abort"] = "wait"
    """What a weight swap does with requests in flight: `wait` lets them finish first (every
    completion comes from one policy), `keep` freezes them and continues with the new weights,
    `abort` cancels them."""

    timeout_s: Annotated[float, Field(gt=0)] = 600.0
    """Seconds a weight swap may wait for in-flight requests, and then for the reload itself."""


class LoraServeConfig(BaseConfig):
    """Serving the LoRA adapters a `[trainer.lora]` run publishes (vLLM's `--enable-lora`)."""

    max_rank: PositiveInt = 16
    """Largest adapter rank accepted (vLLM's `--max-lora-rank`: 1, 8, 16, 32, 64, 128, 256, 320
    or 512); at least `trainer.lora.rank`."""

    max_loras: PositiveInt = 2
    """Adapters that can serve in one batch (vLLM's `--max-loras`); 2 lets requests on the
    previous adapter finish while the new one starts."""

    @model_validator(mode="after")
    def validate_max_rank(self) -> "LoraServeConfig":
        if self.max_rank not in LORA_RANKS:
            fits = min((r for r in LORA_RANKS if r >= self.max_rank), default=max(LORA_RANKS))
            raise ValueError(
                f"lora.max_rank = {self.max_rank}: vLLM takes one of {list(LORA_RANKS)}; use {fits}"
            )
        return self


class InferenceConfig(BaseConfig):
    """Configuration of the `inference` process."""

    model: InferenceModelConfig = InferenceModelConfig()
    """Model to serve."""

    parallel: ParallelConfig = ParallelConfig()
    """GPU parallelism."""

    server: ServerConfig = ServerConfig()
    """Where the server listens."""

    cpu: CpuConfig = CpuConfig()
    """Settings used only when no GPU is visible."""

    weights: WeightsConfig = WeightsConfig()
    """How `/update_weights` and `/reload_weights` swap weights in place."""

    lora: LoraServeConfig | None = None
    """Serve LoRA adapters: `/update_weights` with an adapter folder loads it at run time and
    requests name it (its folder name, e.g. `step_3`) as `model`; None serves full weights only.
    Under `rl` it is set from `trainer.lora`."""

    enforce_eager: bool | None = None
    """Disable CUDA graphs / compilation; None means eager on CPU (fast start) and graphs on GPU."""

    vllm_args: dict[str, Any] = {}
    """Extra vLLM engine arguments by their `vllm serve` name, e.g. `{gpu_memory_utilization =
    0.8}`; checked against vLLM's own list at start."""

    output_dir: UserPath = DEFAULT_RUN_DIR
    """Run directory; `/update_weights` only loads policy folders from its `weights/`."""

    replicas: Annotated[int, Field(gt=0, le=256)] = 1
    """Servers `rl` starts from this config, each on its own share of `--inference-gpu-ids` and
    its own port (the first one's + i); the orchestrator sends each request to the least-loaded one
    and every weight update to all. The `inference` command itself serves one. At most 256 (one
    process and port each)."""

    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    """Sampling seed of the engine."""

    deterministic: bool = False
    """Serve for a reproducible run (shared `deterministic`): a request's logits do not depend
    on what it is batched with (on CPU every linear layer's input is padded to 8 rows, which
    keeps each row on one kernel; on GPUs vLLM's VLLM_BATCH_INVARIANT=1); each request brings
    its own sampling seed."""

    log: LogConfig = LogConfig()
    """Console and log-file verbosity."""

    weight_transfer: WeightTransferConfig = FilesystemTransferConfig()
    """How new policies arrive from the trainer; all processes must agree."""

    @model_validator(mode="after")
    def auto_setup_eager(self) -> "InferenceConfig":
        moved = self.model.enforce_eager
        if moved is not None:
            if self.enforce_eager is not None and self.enforce_eager != moved:
                raise ValueError(
                    f"model.enforce_eager = {moved} and enforce_eager = {self.enforce_eager} "
                    "disagree: set only `enforce_eager`"
                )
            note_renamed("model.enforce_eager", "enforce_eager")
            self.enforce_eager, self.model.enforce_eager = moved, None
        return self

    @model_validator(mode="after")
    def validate_matmul_dtype(self) -> "InferenceConfig":
        if self.cpu.matmul_dtype == "bfloat16" and self.model.dtype == "float16":
            raise ValueError(
                "cpu.matmul_dtype = bfloat16 applies to a float32 model, but model.dtype = "
                "float16: set model.dtype = float32, or cpu.matmul_dtype = model"
            )
        return self

    @model_validator(mode="after")
    def validate_vllm_args(self) -> "InferenceConfig":
        if {"worker_extension_cls", "worker-extension-cls"} & set(self.vllm_args):
            raise ValueError(
                "vllm_args.worker_extension_cls is the server's own "
                "(inference.worker_extension.TiedReload: in-place weight reloads need it): drop "
                "it from vllm_args"
            )
        clash = [k for k in self.vllm_args if k.replace("-", "_") in OWNED_VLLM_ARGS]
        if clash:
            fixes = ", ".join(f"{k} -> {OWNED_VLLM_ARGS[k.replace('-', '_')]}" for k in clash)
            raise ValueError(
                f"vllm_args sets {clash}, which this config owns: use its own keys instead "
                f"({fixes})"
            )
        return self
