"""Attention over packed rows: which kernel runs, and `varlen`, an attention implementation
registered with transformers that attends within each packed sample without a dense mask.

The trainer packs several samples into one row and restarts `position_ids` at 0 for each. With
no attention mask, sdpa then needs a dense [tokens x tokens] block-diagonal mask, which rules out
its flash kernel; `varlen` instead reads the sample boundaries from the position ids and calls
torch's variable-length flash attention (`torch.nn.attention.varlen.varlen_attn`, causal) on
CUDA in bf16/fp16. Elsewhere (CPU, fp32) it runs sdpa sample by sample: the same numbers, slower,
which is what lets a CPU test check its packing logic.
"""

import logging

import torch
import torch.nn.functional as F
from torch import nn

from rlcore.errors import ConfigError

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
    if q.is_cuda and q.dtype in FLASH_DTYPES:
        from torch.nn.attention.varlen import varlen_attn

        out = varlen_attn(
            q, k, v, cu_seqlens, cu_seqlens, max_len, max_len,
            scale=scaling, window_size=window, enable_gqa=k.shape[1] != heads,
        )  # fmt: skip
    else:
        out = per_sample_sdpa(q, k, v, cu_seqlens.tolist(), scaling, window[0])
    return out.reshape(batch, length, heads, dim), None


def flatten(states: torch.Tensor) -> torch.Tensor:
    """[B, H, T, D] -> [B * T, H, D]."""
    batch, heads, length, dim = states.shape
    return states.transpose(1, 2).reshape(batch * length, heads, dim)


def per_sample_sdpa(q, k, v, cu_seqlens: list[int], scaling, left_window: int) -> torch.Tensor:
    """The reference path: causal sdpa on each sample in turn ([T, H, D] in and out)."""
    outs = []
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=False):
        qs, ks, vs = (t[start:end].transpose(0, 1) for t in (q, k, v))
        mask = None
        if left_window >= 0:
            i = torch.arange(end - start, device=q.device)
            mask = (i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] <= left_window)
        out = F.scaled_dot_product_attention(
            qs, ks, vs, attn_mask=mask, is_causal=mask is None, scale=scaling,
            enable_gqa=ks.shape[0] != qs.shape[0],
        )  # fmt: skip
        outs.append(out.transpose(0, 1))
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


def choose_attention(requested: str, device: torch.device, dtype: torch.dtype) -> str:
    """The transformers attention implementation to load the model with. `auto`: on CUDA in
    bf16/fp16, flash-attn's kernels when installed, else torch's varlen flash attention; sdpa
    otherwise (CPU, fp32). An explicit choice is kept."""
    choice = requested
    if requested.startswith("flash_attention") and flash_attn_version() is None:
        raise ConfigError(
            f"model.attn_implementation = {requested} needs the flash-attn package, which is not "
            "installed: install it (pip install flash-attn) or use auto (torch's varlen flash "
            "attention on CUDA, sdpa elsewhere)"
        )
    if requested == "auto":
        choice = "sdpa"
        if device.type == "cuda" and dtype in FLASH_DTYPES:
            version = flash_attn_version()
            if version is not None:
                choice = f"flash_attention_{version}"
            elif varlen_available():
                choice = VARLEN
    if choice == VARLEN:
        register_varlen()
    how = f" (attn_implementation = {requested})" if requested == "auto" else ""
    logger.info(f"attention: {choice}{how}")
    return choice
