"""The CPU KV-cache check before vLLM starts (inference/kv_check.py): a cache that cannot hold
one request of max_model_len is a message naming both knobs, counted as vLLM counts it."""

import json
from argparse import Namespace

import pytest

from inference.kv_check import check_cpu_kv_cache
from rlcore.errors import ConfigError

SMOLLM2 = {
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "hidden_size": 576,
    "max_position_embeddings": 8192,
    "torch_dtype": "bfloat16",
}


def folder(tmp_path, **changes):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2 | changes))
    return str(tmp_path)


def args(gib=0.125, max_len=256, block=32, dtype="float32", kv_dtype="auto"):
    return Namespace(
        kv_cache_memory_bytes=int(gib * 2**30),
        max_model_len=max_len,
        block_size=block,
        dtype=dtype,
        kv_cache_dtype=kv_dtype,
    )


def test_the_quick_start_fits_and_a_longer_request_is_refused_with_vllms_count(tmp_path):
    model = folder(tmp_path)
    check_cpu_kv_cache(args(), model)
    check_cpu_kv_cache(args(max_len=2912), model)  # vLLM's log: "CPU KV cache size: 2,912 tokens"
    with pytest.raises(ConfigError) as err:
        check_cpu_kv_cache(args(max_len=4096), model)
    message = str(err.value)
    assert "holds 2912 tokens" in message and "max_model_len 4096" in message
    assert "--inference.cpu.kvcache-space-gib to at least 0.18" in message
    assert "--inference.model.max-model-len" in message


def test_blocks_dtype_and_the_models_own_length_count(tmp_path):
    model = folder(tmp_path)
    with pytest.raises(ConfigError, match="holds 2816 tokens .*128-token blocks"):
        check_cpu_kv_cache(args(block=None, max_len=2900), model)
    check_cpu_kv_cache(args(dtype="bfloat16", max_len=5824), model)  # half the bytes a token
    with pytest.raises(ConfigError, match="max_model_len 8192"):
        check_cpu_kv_cache(args(max_len=None), model)  # unset: the model's own length
    check_cpu_kv_cache(args(dtype="auto", max_len=5824), model)  # auto: the folder's bf16


LAYOUTS = [
    {"kv_lora_rank": 512},
    {"sliding_window": 4096},
    {"layer_types": ["full_attention", "sliding_attention"]},
]


@pytest.mark.parametrize("changes", LAYOUTS)
def test_other_cache_layouts_are_left_to_vllm(tmp_path, changes):
    check_cpu_kv_cache(args(max_len=8192), folder(tmp_path, **changes))


def test_a_window_turned_off_is_plain_attention(tmp_path):
    model = folder(tmp_path, sliding_window=4096, use_sliding_window=False)  # Qwen3's config
    with pytest.raises(ConfigError):
        check_cpu_kv_cache(args(max_len=8192), model)


def test_what_it_cannot_know_is_left_to_vllm(tmp_path):
    check_cpu_kv_cache(args(max_len=8192), str(tmp_path / "not-a-folder"))
    check_cpu_kv_cache(args(max_len=8192, kv_dtype="fp8"), folder(tmp_path))
    check_cpu_kv_cache(args(gib=0, max_len=8192), folder(tmp_path))  # VLLM_CPU_KVCACHE_SPACE
    (tmp_path / "config.json").write_text("{")
    check_cpu_kv_cache(args(max_len=8192), str(tmp_path))
