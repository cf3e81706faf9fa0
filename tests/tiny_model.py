"""The tests' tiny model: a random-weight Qwen3 (hidden 64, 2 layers, head_dim 32, about 3.2M
parameters) with SmolLM2's tokenizer and ChatML template, built in seconds on CPU and cached per
seed (`$RL_CACHE_DIR`, default ~/.cache/rl-launcher). Benchmarks use it too.

    python -m tests.tiny_model OUT_DIR [SEED]      build one into OUT_DIR
"""

import sys
from pathlib import Path

from rlcore.host.models import EOS_TOKEN, cache_dir, cached_build, load_bundled_tokenizer, set_eos

TINY_VERSION = 1
"""Bump when the recipe changes, so stale cached copies are not reused."""


def cached_tiny_model(seed: int = 0) -> Path:
    """A tiny model built once per seed into the cache folder and reused afterwards."""
    return cached_build(
        cache_dir() / f"tiny-qwen3-v{TINY_VERSION}-seed{seed}",
        lambda out: build_tiny_model(out, seed=seed),
    )


def build_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write a tiny random-weight Qwen3 (hidden 64, 2 layers, head_dim 32, about 3.2M
    parameters) with SmolLM2's tokenizer and ChatML template to `out_dir`; returns `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    out_dir = Path(out_dir)
    tokenizer = load_bundled_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,  # vLLM's CPU attention needs head_dim >= 32
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        dtype="float32",
    )
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    set_eos(model, tokenizer)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) not in (1, 2):
        print("usage: python -m tests.tiny_model OUT_DIR [SEED]", file=sys.stderr)
        sys.exit(2)
    print(build_tiny_model(Path(argv[0]), seed=int(argv[1]) if len(argv) == 2 else 0))


if __name__ == "__main__":
    main()
