"""Tiny random models of several architecture families, built offline, whose head and attention
features visibly matter.

Random init leaves logits near 0, where a softcap, a logit scale or a head bias hardly shows, so
each model is pushed into the range where they do: the final norm is scaled up (logits of a few
units to tens), Gemma-2's q/k projections are scaled up (attention logits past its softcap), its
sliding window is shorter than the test sequences, and Phi's head bias is random. Every model has
head_dim 32, the least vLLM's CPU attention takes.
"""

from pathlib import Path

import torch

HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM = 128, 2, 4, 2, 32
NORM_SCALE = 6.0
QK_SCALE = 12.0


def family_config(family: str, vocab_size: int, **ids):
    """The HF config of `family`'s tiny model."""
    import transformers as tf

    common = dict(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=128,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=4096,
        dtype="float32",
        **ids,
    )
    if family == "qwen3":
        return tf.Qwen3Config(**common, head_dim=HEAD_DIM, tie_word_embeddings=True)
    if family == "llama":
        return tf.LlamaConfig(**common, head_dim=HEAD_DIM, tie_word_embeddings=False)
    if family == "gemma2":
        return tf.Gemma2Config(
            **common,
            head_dim=HEAD_DIM,
            query_pre_attn_scalar=HEAD_DIM,
            sliding_window=8,
            attn_logit_softcapping=10.0,
            final_logit_softcapping=4.0,
        )
    if family == "granite":
        return tf.GraniteConfig(
            **common,
            logits_scaling=4.0,
            embedding_multiplier=2.0,
            residual_multiplier=0.5,
            attention_multiplier=HEAD_DIM**-0.5,
            tie_word_embeddings=True,
        )
    if family == "phi":  # lm_head has a bias; partial rotary embeddings
        return tf.PhiConfig(**common, partial_rotary_factor=0.5)
    if family == "cohere":
        return tf.CohereConfig(**common, logit_scale=0.25, tie_word_embeddings=True)
    return other_family_config(family, common)


def other_family_config(family: str, common: dict):
    """The architectures in HEAD_TRANSFORMS that share a head transform with one above: checked
    against their HF forward in the unit tier only (tests/unit/trainer/test_families.py)."""
    import transformers as tf

    with_head_dim = {**common, "head_dim": HEAD_DIM}
    if family == "mistral":
        return tf.MistralConfig(**with_head_dim, sliding_window=None)
    if family == "qwen2":
        return tf.Qwen2Config(**common, tie_word_embeddings=True)
    if family == "gemma":
        return tf.GemmaConfig(**with_head_dim)
    if family == "gemma3":
        return tf.Gemma3TextConfig(
            **with_head_dim,
            query_pre_attn_scalar=HEAD_DIM,
            sliding_window=8,
            final_logit_softcapping=4.0,
        )
    if family == "cohere2":
        return tf.Cohere2Config(
            **with_head_dim, logit_scale=0.25, tie_word_embeddings=True, sliding_window=8
        )
    if family == "phi3":
        return tf.Phi3Config(**common)
    if family == "olmo2":
        return tf.Olmo2Config(**common)
    if family == "stablelm":
        return tf.StableLmConfig(**common, partial_rotary_factor=0.5)
    if family == "starcoder2":
        return tf.Starcoder2Config(**common, sliding_window=None)
    raise ValueError(f"unknown family {family}")


FAMILIES = ["qwen3", "llama", "gemma2", "granite", "phi", "cohere"]
"""Families with every test: trainer, shared prompts, and vLLM serving them (integration)."""
HEAD_FAMILIES = [
    *FAMILIES,
    "mistral",
    "qwen2",
    "gemma",
    "gemma3",
    "cohere2",
    "phi3",
    "olmo2",
    "stablelm",
    "starcoder2",
]
"""One tiny model per architecture in trainer.logprob_head.HEAD_TRANSFORMS."""


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    decoder = model.get_decoder()
    return getattr(decoder, "norm", None) or decoder.final_layernorm


@torch.no_grad()
def make_visible(model: torch.nn.Module, seed: int) -> None:
    """Scale the final norm (and Gemma-2's q/k), randomise head biases: see the module doc."""
    gen = torch.Generator().manual_seed(seed)
    norm = final_norm(model)
    if "Gemma" in type(norm).__name__:  # Gemma's RMSNorm multiplies by (1 + weight)
        norm.weight.copy_((1 + norm.weight) * NORM_SCALE - 1)
    else:
        norm.weight.mul_(NORM_SCALE)
    if type(model).__name__.startswith("Gemma2"):
        for layer in model.get_decoder().layers:
            layer.self_attn.q_proj.weight.mul_(QK_SCALE)
            layer.self_attn.k_proj.weight.mul_(QK_SCALE)
    head = model.get_output_embeddings()
    if head.bias is not None:
        head.bias.copy_(torch.randn(head.bias.shape, generator=gen) * 2.0)


def build_family_model(family: str, vocab_size: int = 512, seed: int = 0, **ids):
    """A tiny random fp32 model of `family`, in memory."""
    from transformers import AutoModelForCausalLM

    ids = {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1} | ids
    torch.manual_seed(seed)
    config = family_config(family, vocab_size, **ids)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    make_visible(model, seed)
    return model


def save_family_model(family: str, out_dir: Path, seed: int = 0) -> Path:
    """`family`'s tiny model with SmolLM2's tokenizer and ChatML template, as an HF folder that
    vLLM and the trainer load."""
    from rlcore.host.models import EOS_TOKEN, load_bundled_tokenizer, set_eos

    tokenizer = load_bundled_tokenizer()
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model = build_family_model(family, len(tokenizer), seed, **ids)
    set_eos(model, tokenizer)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)
