"""Whether the CPU KV cache holds one request of the longest length served, checked before
vLLM starts: on CPU vLLM allocates exactly `inference.cpu.kvcache_space_gib`, and one too
small for `max_model_len` fails its engine start with a traceback from a child process.

The check reads the model folder's config.json and counts as vLLM does for plain attention
(keys and values of every layer, in the model's dtype, in whole blocks: 128 tokens on CPU
unless `vllm_args.block_size` says otherwise). Models whose cache is laid out otherwise
(latent attention, sliding windows, a quantized cache) are left to vLLM."""

import json
from pathlib import Path

from rlcore.config.base import CPU_BLOCK_TOKENS
from rlcore.errors import ConfigError
from rlcore.host.machine import DTYPE_BYTES


def kv_bytes_per_token(hf: dict, dtype: str) -> int | None:
    """Bytes of KV cache per token of a plain-attention model, or None when it is not one."""
    windowed = hf.get("sliding_window") and hf.get("use_sliding_window", True)  # Qwen: off
    if hf.get("kv_lora_rank") or windowed:
        return None
    if any(kind != "full_attention" for kind in hf.get("layer_types") or []):
        return None
    heads = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
    if dtype == "auto":
        dtype = str(hf.get("torch_dtype") or hf.get("dtype") or "float32")
    width = DTYPE_BYTES.get(dtype, 4)
    return 2 * hf["num_hidden_layers"] * hf.get("num_key_value_heads", heads) * head_dim * width


def check_cpu_kv_cache(args, model_path: str) -> None:
    """A ConfigError naming the knobs when the KV cache cannot hold one request of
    `max_model_len` tokens (`args`: vLLM's parsed server arguments)."""
    budget = getattr(args, "kv_cache_memory_bytes", None)
    if not budget or getattr(args, "kv_cache_dtype", "auto") != "auto":
        return  # VLLM_CPU_KVCACHE_SPACE sizes it, or a quantized cache: vLLM checks
    try:
        hf = json.loads((Path(model_path) / "config.json").read_text())
        hf = hf.get("text_config", hf)
        per_token = kv_bytes_per_token(hf, str(args.dtype))
        max_len = args.max_model_len or hf["max_position_embeddings"]
    except (OSError, ValueError, KeyError, TypeError, ZeroDivisionError):
        return  # no local folder or an unusual config: vLLM checks
    if per_token is None:
        return
    block = args.block_size or CPU_BLOCK_TOKENS
    have = budget // (per_token * block)
    need = -(-max_len // block)
    if have >= need:
        return
    need_gib = need * block * per_token / 2**30
    raise ConfigError(
        f"inference.cpu.kvcache_space_gib = {budget / 2**30:g} holds {have * block} tokens of "
        f"this model's KV cache ({block}-token blocks), fewer than one request of "
        f"max_model_len {max_len} needs ({need_gib:.2f} GiB): raise "
        f"--inference.cpu.kvcache-space-gib to at least {need_gib:.2f}, or lower "
        "--inference.model.max-model-len (under rl, --seq-len)"
    )
