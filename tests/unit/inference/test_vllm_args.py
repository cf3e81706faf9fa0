"""The vLLM arguments the server derives from its config."""

from inference.config import InferenceConfig
from inference.vllm_args import owned_argv


def kv_bytes(argv: list[str]) -> int | None:
    flag = "--kv-cache-memory-bytes"
    return int(argv[argv.index(flag) + 1]) if flag in argv else None


def test_cpu_kv_cache_takes_fractions_of_a_gib(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    config = InferenceConfig.model_validate({"cpu": {"kvcache_space_gib": 0.5}})
    assert kv_bytes(owned_argv(config, "/m", on_cpu=True)) == 2**29
    assert kv_bytes(owned_argv(config, "/m", on_cpu=False)) is None  # GPUs size it themselves


def test_cpu_kv_cache_environment_variable_wins(monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "3")
    assert kv_bytes(owned_argv(InferenceConfig(), "/m", on_cpu=True)) is None
