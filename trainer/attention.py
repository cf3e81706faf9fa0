"""Attention over packed rows: which kernel runs, and `varlen`, an attention implementation
registered with transformers that attends within each packed sample without a dense mask.

The trainer packs several samples into one row and restarts `position_ids` at 0 for each. With
no attention mask, sdpa then needs a dense [tokens x tokens] block-diagonal mask, which rules out
its flash kernel; `varlen` instead reads the sample boundaries from the position ids and calls
torch's variable-length flash attention (`torch.nn.attention.varlen.varlen_attn`, causal) on
CUDA in bf16/fp16. Elsewhere (CPU, fp32) it runs sdpa sample by sample: the same numbers, slower,
which is what lets a CPU test check its packing logic.
"""

import functools
import inspect
import logging

import torch
import torch.nn.functional as F
from torch import nn

from rlcore.errors import ConfigError
from trainer.model_type import TrainerModel

logger = logging.getLogger("trainer")

VARLEN = "varlen"
FLASH_DTYPES = (torch.bfloat16, torch.float16)
_cache: dict[str, object] = {}


def segment_bounds(position_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Cumulative sample offsets (int32, starting at 0, ending at the token count) of the
    flattened [batch, tokens] rows, and the longest sample: a sample starts wherever the
    position does not follow the previous one by exactly 1, and at every row start."""
    if _cache.get("ids") is position_ids:  # every layer of one forward pass asks the same
        return _cache["bounds"]  # type: ignore[return-value]
    batch, length = position_ids.shape
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] - position_ids[:, :-1] != 1
    offsets = torch.nonzero(starts.reshape(-1)).reshape(-1)
    total = torch.tensor([batch * length], device=offsets.device)
    cu_seqlens = torch.cat([offsets, total]).to(torch.int32)
    bounds = (cu_seqlens, int((cu_seqlens[1:] - cu_seqlens[:-1]).max()))
    _cache.update(ids=position_ids, bounds=bounds)
    return bounds


def varlen_available() -> bool:
    """torch ships variable-length flash attention (>= 2.10) and a CUDA device is present."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return torch.cuda.is_available()


def varlen_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    position_ids: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention interface: query [B, Hq, T, D], key/value [B, Hkv, T, D] in,
    [B, T, Hq, D] out; causal within each packed sample."""
    batch, heads, length, dim = query.shape
    if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise ValueError("varlen attention takes packed rows without padding (no attention mask)")
    if position_ids is None:
        position_ids = torch.arange(length, device=query.device).expand(batch, length)
    cu_seqlens, max_len = segment_bounds(position_ids)
    q, k, v = (flatten(t) for t in (query, key, value))
    window = (-1, 0) if sliding_window is None else (sliding_window - 1, 0)
    if q.is_cuda and q.dtype in FLASH_DTYPES and (kernel := varlen_kernel(window)) is not None:
        out = call_varlen(kernel, q, k, v, cu_seqlens, max_len, scaling)
    else:
        out = per_sample_sdpa(q, k, v, cu_seqlens.tolist(), scaling, window[0])
    return out.reshape(batch, length, heads, dim), None


def call_varlen(kernel, q, k, v, cu_seqlens, max_len: int, scaling) -> torch.Tensor:
    """Run `varlen_kernel`'s choice on flattened [T, H, D] query, key and value; where it takes
    no `enable_gqa`, each query head gets its own copy of its key/value head."""
    kernel_fn, options, takes_gqa = kernel
    groups = q.shape[1] // k.shape[1]
    if groups > 1 and takes_gqa:
        options = {**options, "enable_gqa": True}
    elif groups > 1:
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
    return kernel_fn(q, k, v, cu_seqlens, cu_seqlens, max_len, max_len, scale=scaling, **options)


@functools.cache
def varlen_kernel(window: tuple[int, int]):
    """torch's varlen_attn, the keywords this torch takes for a causal `window` and whether it
    takes `enable_gqa`: (function, keywords, takes_gqa); None where this torch cannot apply the
    window (the per-sample path runs then). torch 2.10 took `is_causal`, 2.11 `window_size`;
    later ones take `enable_gqa` too."""
    from torch.nn.attention.varlen import varlen_attn

    return varlen_options(varlen_attn, inspect.signature(varlen_attn).parameters, window)


def varlen_options(kernel_fn, params, window: tuple[int, int]):
    """`varlen_kernel`'s choice for a kernel whose keyword parameters are `params`."""
    if "window_size" in params:
        options: dict[str, object] = {"window_size": window}
    elif window == (-1, 0) and "is_causal" in params:
        options = {"is_causal": True}
    else:
        return None
    return kernel_fn, options, "enable_gqa" in params


def flatten(states: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B * T, H, D]."""
    batch, heads, length, dim = states.shape
    return states.transpose(1, 2).reshape(batch * length, heads, dim)


def per_sample_sdpa(q, k, v, cu_seqlens: list[int], scaling, left_window: int) -> torch.Tensor:
    """The reference path: causal sdpa on each sample in turn ([T, H, D] in and out). Each
    sample goes in as a batch of one, [1, H, T, D]: on a CPU, sdpa's flash kernel takes only
    4-D inputs (3-D ones fall back to its math path, 3.5x slower on a 1,024-token sample)."""
    outs = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=False):
        qs, ks, vs = (t[start:end].transpose(0, 1)[None] for t in (q, k, v))
        mask = None
        if left_window >= 0:
            i = torch.arange(end - start, device=q.device)
            mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= left_window)
        out = F.scaled_dot_product_attention(
            qs,
            ks,
            vs,
            attn_mask=mask,
            is_causal=mask is None,
            scale=scaling,
            enable_gqa=ks.shape[1] != qs.shape[1],
        )
        outs.append(out[0].transpose(0, 1))
    return torch.cat(outs)


def register_varlen() -> None:
    """Make `attn_implementation="varlen"` known to transformers (idempotent); like flash
    attention, it needs no mask (None unless there is padding)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

    AttentionInterface.register(VARLEN, varlen_attention_forward)
    ALL_MASK_ATTENTION_FUNCTIONS.register(VARLEN, flash_attention_mask)


def flash_attn_version() -> int | None:
    """The flash-attn package the user installed: 3 (flash_attn_interface), 2, or None."""
    import importlib.util

    if importlib.util.find_spec("flash_attn_interface"):
        return 3
    if importlib.util.find_spec("flash_attn"):
        return 2
    return None


# What each kernel can do beyond causal attention within packed samples. Sliding windows come
# from transformers' masks (eager, sdpa) or the kernel's window argument (varlen, flash, flex);
# attention-logit softcapping needs the kernel to apply tanh to the scores.
KERNEL_FEATURES: dict[str, set[str]] = {
    "eager": {"softcap", "sliding_window"},
    "sdpa": {"sliding_window"},
    VARLEN: {"sliding_window"},
    "flex_attention": {"softcap", "sliding_window"},
    "flash_attention_2": {"softcap", "sliding_window"},
    "flash_attention_3": {"softcap", "sliding_window"},
}


def attention_needs(model_config) -> dict[str, str]:
    """The attention features this model uses: feature -> what it is, for the log."""
    text = model_config.get_text_config() if model_config is not None else None
    needs = {}
    softcap = getattr(text, "attn_logit_softcapping", None)
    if softcap:
        needs["softcap"] = f"attention-logit softcapping at {softcap:g}"
    window = getattr(text, "sliding_window", None)
    if window and getattr(text, "use_sliding_window", True) is not False:
        needs["sliding_window"] = f"a sliding window of {window} tokens"
    return needs


def missing_features(kernel: str, model_config) -> list[str]:
    """What this model needs that `kernel` does not do (descriptions), empty when none."""
    have = KERNEL_FEATURES.get(kernel, set())
    return [what for need, what in attention_needs(model_config).items() if need not in have]


def choose_attention(
    requested: str,
    device: torch.device,
    dtype: torch.dtype,
    model_config=None,
    masked_rows: bool = True,
) -> str:
    """The transformers attention implementation to load the model with. `auto`: on CUDA in
    bf16/fp16, flash-attn's kernels when installed, else torch's varlen flash attention; on a
    CPU, `varlen` (sdpa sample by sample) where rows carry no explicit mask (`masked_rows`
    False: no shared prompts) and nothing compiles, else sdpa; and among those only a kernel
    that does what the model needs (attention-logit softcapping: flash-attn, else eager). An
    explicit choice is kept, with a warning when it lacks something the model needs."""
    choice = requested
    if requested.startswith("flash_attention") and flash_attn_version() is None:
        raise ConfigError(
            f"model.attn_implementation = {requested} needs the flash-attn package, which is not "
            "installed: install it (pip install flash-attn) or use auto (torch's varlen flash "
            "attention on CUDA, sdpa elsewhere)"
        )
    if requested == "auto":
        choice = auto_attention(device, dtype, model_config, masked_rows)
    if choice == VARLEN:
        register_varlen()
    needs = attention_needs(model_config)
    missing = missing_features(choice, model_config)
    why = f"; the model uses {', '.join(needs.values())}" if needs else ""
    how = f" (attn_implementation = {requested}{why})" if requested == "auto" else ""
    if choice == VARLEN and device.type != "cuda":
        how = f", sdpa sample by sample{how}"
    logger.info(f"attention: {choice}{how}")
    if missing:
        logger.warning(
            f"attention: {choice} lacks {', '.join(missing)}, which this model uses: its logprobs "
            "will differ from the model's own (and the inference engine's); set "
            "model.attn_implementation = auto or eager"
        )
    return choice


def shared_prompt_blocker(model: TrainerModel, seq_len: int) -> str | None:
    """Why this model cannot take rows whose samples share a prompt (an explicit [T x T] mask,
    trainer/data.py), or None when it can: only sdpa reads such a mask, and a mask given
    explicitly replaces the model's own sliding window or attention chunks."""
    kernel = model.config._attn_implementation
    if kernel != "sdpa":
        return f"attention is {kernel}; an explicit mask needs sdpa"
    text = model.config.get_text_config()
    window = getattr(text, "sliding_window", None)
    needs_window = "sliding_window" in attention_needs(model.config)
    if needs_window and window is not None and window < seq_len:
        return f"the model's sliding window ({window} tokens) is shorter than seq_len"
    if getattr(text, "attention_chunk_size", None):
        return "the model attends in chunks"
    return None


def auto_attention(
    device: torch.device, dtype: torch.dtype, model_config, masked_rows: bool = True
) -> str:
    """`auto`'s pick: the fastest kernel this machine has that does what the model needs. On
    a CPU, rows of packed samples without an explicit mask go sample by sample (`varlen`):
    sdpa would attend each whole row through a dense block-diagonal mask (a row of twenty
    50-token chats: a forward and backward of the default model 1.9 s against 2.5 in bf16, 4.7
    against 5.9 in fp32; one 1,024-token sample costs the same either way)."""
    candidates = ["sdpa"] if masked_rows or device.type != "cpu" else [VARLEN, "sdpa"]
    if device.type == "cuda" and dtype in FLASH_DTYPES:
        version = flash_attn_version()
        candidates = [VARLEN, "sdpa"] if varlen_available() else ["sdpa"]
        if version is not None:
            candidates.insert(0, f"flash_attention_{version}")
    candidates.append("eager")  # does everything the supported architectures need, slowly
    return next(k for k in candidates if not missing_features(k, model_config))
