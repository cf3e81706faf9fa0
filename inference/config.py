"""Inference config schema (pydantic and the standard library only)."""

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator

from launcher.config import BaseConfig, LogConfig, ModelConfig, PositiveInt


class InferenceModelConfig(ModelConfig):
    max_model_len: PositiveInt | None = None
    """Longest sequence (prompt + completion) the server accepts; None uses the model's."""


class ParallelConfig(BaseConfig):
    dp: PositiveInt | None = None
    """Data-parallel engine replicas; None derives it from the GPU count and `tp`."""

    tp: PositiveInt = 1
    """Tensor-parallel GPUs per replica."""


class ServerConfig(BaseConfig):
    host: str = "127.0.0.1"
    """Address to bind; use 0.0.0.0 only on a trusted network."""

    port: Annotated[int, Field(ge=1, le=65535)] = 8000
    """TCP port of the OpenAI-compatible server."""

    startup_timeout_s: Annotated[float, Field(gt=0)] = 900.0
    """Seconds the server may take to load the model and answer /health."""


class CpuConfig(BaseConfig):
    kvcache_space_gib: PositiveInt = 4
    """KV-cache memory in GiB when serving on CPU (VLLM_CPU_KVCACHE_SPACE)."""

    omp_threads_bind: str = "auto"
    """CPU cores for vLLM's OpenMP threads, e.g. `0-1`; `auto` binds all cores."""


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

    enforce_eager: bool | None = None
    """Disable CUDA graphs / compilation; None means eager on CPU (fast start) and graphs on GPU."""

    vllm_args: dict[str, Any] = {}
    """Extra vLLM engine arguments by their `vllm serve` name, e.g. `{gpu_memory_utilization =
    0.8}`; checked against vLLM's own list at start."""

    output_dir: Path = Path("outputs")
    """Run directory; `/update_weights` only loads folders inside it."""

    seed: int = 0
    """Sampling seed of the engine."""

    log: LogConfig = LogConfig()
    """Console and log-file verbosity."""

    @model_validator(mode="after")
    def validate_vllm_args(self) -> "InferenceConfig":
        owned = {"model", "port", "host", "tensor_parallel_size", "data_parallel_size", "dtype"}
        clash = sorted(owned & {k.replace("-", "_") for k in self.vllm_args})
        if clash:
            raise ValueError(
                f"vllm_args sets {clash}, which this config owns: use model.name, model.dtype, "
                "server.host, server.port, parallel.tp or parallel.dp instead"
            )
        return self
