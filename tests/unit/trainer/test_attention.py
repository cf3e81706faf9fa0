"""Packed rows: every attention implementation attends within each sample only, and `auto`
picks the kernel the machine has."""

import inspect
import logging

import pytest
import torch
from test_trainer_data import random_batch

from rlcore.contracts.protocol import BatchTensors
from rlcore.errors import ConfigError
from trainer import attention
from trainer.attention import choose_attention, segment_bounds
from trainer.data import split_for_ranks


def packed_and_alone(model_dir, implementation: str, device: str, dtype: torch.dtype):
    """Logits of three samples packed into one row, and of each sample run alone with sdpa."""
    from transformers import AutoModelForCausalLM

    attention.register_varlen()
    load = dict(dtype=dtype, attn_implementation=implementation)
    model = AutoModelForCausalLM.from_pretrained(model_dir, **load).to(device)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    batch = random_batch(0, num_samples=3, vocab_size=1000)
    (packed,) = split_for_ranks(BatchTensors.from_batch(batch), 200, 0, 1)
    packed = packed.to(torch.device(device))
    with torch.no_grad():
        out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, use_cache=False)
        alone = []
        for sample in batch.samples:  # packing keeps the input order within a row
            ids = torch.tensor([sample.prompt_ids + sample.completion_ids], device=device)
            alone.append(reference(input_ids=ids).logits[0])
    return out.logits[0], torch.cat(alone)


@pytest.mark.parametrize("implementation", ["sdpa", "eager", "varlen"])
def test_packed_rows_do_not_attend_across_samples(tiny_model_dir, implementation):
    packed, alone = packed_and_alone(tiny_model_dir, implementation, "cpu", torch.float32)
    torch.testing.assert_close(packed, alone)


@pytest.mark.gpu
@pytest.mark.skipif(not attention.varlen_available(), reason="needs CUDA and torch varlen_attn")
def test_varlen_flash_kernel_matches_per_sample_sdpa(tiny_model_dir):
    packed, alone = packed_and_alone(tiny_model_dir, "varlen", "cuda", torch.bfloat16)
    torch.testing.assert_close(packed.float(), alone.float(), atol=3e-2, rtol=3e-2)


def test_segment_bounds_follow_restarting_positions():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3], [5, 6, 7, 0, 1, 2, 3, 4, 5]])
    cu_seqlens, longest = segment_bounds(positions)
    assert cu_seqlens.tolist() == [0, 3, 5, 9, 12, 18] and cu_seqlens.dtype == torch.int32
    assert longest == 6


def test_auto_picks_sdpa_on_cpu_and_says_so(caplog):
    with caplog.at_level(logging.INFO, logger="trainer"):
        assert choose_attention("auto", torch.device("cpu"), torch.bfloat16) == "sdpa"
    assert "attention: sdpa (attn_implementation = auto)" in caplog.text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_auto_goes_sample_by_sample_on_cpu_where_rows_carry_no_mask(dtype, caplog):
    cpu = torch.device("cpu")
    with caplog.at_level(logging.INFO, logger="trainer"):
        assert choose_attention("auto", cpu, dtype, masked_rows=False) == "varlen"
    assert "attention: varlen, sdpa sample by sample (attn_implementation = auto)" in caplog.text
    assert choose_attention("auto", cpu, dtype, masked_rows=True) == "sdpa"
    assert choose_attention("sdpa", cpu, dtype, masked_rows=False) == "sdpa"  # asked for


def test_auto_keeps_sdpa_on_cuda_in_fp32_whatever_the_rows():
    cuda = torch.device("cuda")
    assert choose_attention("auto", cuda, torch.float32, masked_rows=False) == "sdpa"


def test_packed_rows_sample_by_sample_in_bf16_match_each_sample_alone(tiny_model_dir):
    packed, alone = packed_and_alone(tiny_model_dir, "varlen", "cpu", torch.bfloat16)
    torch.testing.assert_close(packed.float(), alone.float(), atol=3e-2, rtol=3e-2)


@pytest.mark.parametrize(("length", "kv_heads"), [(1, 2), (7, 1), (40, 4)])
def test_per_sample_sdpa_takes_the_4d_kernel_and_matches_by_hand(length, kv_heads):
    torch.manual_seed(length)
    cu_seqlens = [0, length, 2 * length + 3]
    q = torch.randn(cu_seqlens[-1], 4, 8, requires_grad=True)
    k, v = (torch.randn(cu_seqlens[-1], kv_heads, 8, requires_grad=True) for _ in range(2))
    out = attention.per_sample_sdpa(q, k, v, cu_seqlens, 0.5, -1)
    expected = by_hand(q, k, v, cu_seqlens, 0.5)
    torch.testing.assert_close(out, expected)
    out.sum().backward()  # the backward runs through the same 4-D kernel
    assert q.grad is not None and torch.isfinite(q.grad).all()


def test_auto_prefers_flash_attn_then_varlen_on_cuda(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(attention, "varlen_available", lambda: True)
    monkeypatch.setattr(attention, "flash_attn_version", lambda: None)
    assert choose_attention("auto", cuda, torch.bfloat16) == "varlen"
    assert choose_attention("auto", cuda, torch.float32) == "sdpa"  # flash kernels need bf16
    monkeypatch.setattr(attention, "flash_attn_version", lambda: 2)
    assert choose_attention("auto", cuda, torch.bfloat16) == "flash_attention_2"


def test_flash_attention_without_the_package_names_the_fix(monkeypatch):
    monkeypatch.setattr(attention, "flash_attn_version", lambda: None)
    with pytest.raises(ConfigError, match="needs the flash-attn package.*or use auto"):
        choose_attention("flash_attention_2", torch.device("cuda"), torch.bfloat16)


def by_hand(q, k, v, cu_seqlens: list[int], scale: float, left: int = -1) -> torch.Tensor:
    """Attention written out, the oracle: for each sample, each query head h and position i,
    softmax(scale * q.k) over positions j of the same sample with i - left <= j <= i (left -1:
    all earlier ones), then the weighted sum of v; query head h reads key/value head
    h // (query heads per key/value head)."""
    out = torch.zeros_like(q)
    groups = q.shape[1] // k.shape[1]
    for start, end in zip(cu_seqlens[:-1], cu_seqlens[1:], strict=False):
        for i in range(start, end):
            first = start if left < 0 else max(start, i - left)
            for h in range(q.shape[1]):
                keys, values = k[first : i + 1, h // groups], v[first : i + 1, h // groups]
                weights = torch.softmax(scale * (keys @ q[i, h]), dim=0)
                out[i, h] = weights @ values
    return out


def window_of(left_right: tuple[int, int]) -> int:
    assert left_right[1] == 0, "causal kernels only"
    return left_right[0]


def torch_2_10_kernel(
    q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, is_causal=False
):
    assert is_causal and k.shape[1] == q.shape[1], "torch 2.10's kernel: causal, no GQA"
    return by_hand(q, k, v, cu_q.tolist(), scale)


def torch_2_11_kernel(
    q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None, window_size=(-1, -1)
):
    assert k.shape[1] == q.shape[1], "torch 2.11's kernel has no enable_gqa"
    return by_hand(q, k, v, cu_q.tolist(), scale, window_of(window_size))


def torch_2_13_kernel(
    q,
    k,
    v,
    cu_q,
    cu_k,
    max_q,
    max_k,
    *,
    return_aux=None,
    scale=None,
    window_size=(-1, -1),
    enable_gqa=False,
):
    assert enable_gqa == (k.shape[1] != q.shape[1])
    return by_hand(q, k, v, cu_q.tolist(), scale, window_of(window_size))


def qkv(kv_heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(9, 4, 8), torch.randn(9, kv_heads, 8), torch.randn(9, kv_heads, 8)


CU_SEQLENS = [0, 3, 5, 9]


@pytest.mark.parametrize(
    ("kernel", "left"),
    [
        (torch_2_10_kernel, -1),
        (torch_2_11_kernel, -1),
        (torch_2_11_kernel, 1),
        (torch_2_13_kernel, -1),
        (torch_2_13_kernel, 1),
    ],
)
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_each_torchs_varlen_signature_gets_the_same_grouped_attention(kernel, left, kv_heads):
    """The keywords differ between torch releases (the GPU machine's torch 2.11 has no
    enable_gqa): every one gets causal attention (within its window) inside each sample,
    query heads sharing their group's key/value head, as attention written out by hand
    gives it."""
    q, k, v = qkv(kv_heads)
    choice = attention.varlen_options(kernel, inspect.signature(kernel).parameters, (left, 0))
    out = attention.call_varlen(
        choice, q, k, v, torch.tensor(CU_SEQLENS, dtype=torch.int32), 4, 0.5
    )
    torch.testing.assert_close(out, by_hand(q, k, v, CU_SEQLENS, 0.5, left))


@pytest.mark.parametrize("left", [-1, 0, 1, 3])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_the_per_sample_path_is_attention_by_hand(kv_heads, left):
    """The path taken where no kernel applies the window (and the reference the packed-row
    tests stand on): causal, within each sample and window, grouped heads, the given scale."""
    q, k, v = qkv(kv_heads)
    out = attention.per_sample_sdpa(q, k, v, CU_SEQLENS, 0.5, left)
    torch.testing.assert_close(out, by_hand(q, k, v, CU_SEQLENS, 0.5, left))


def test_a_sliding_window_on_torch_2_10_takes_the_per_sample_path():
    def options(kernel):
        return attention.varlen_options(kernel, inspect.signature(kernel).parameters, (127, 0))

    assert options(torch_2_10_kernel) is None
    assert options(torch_2_11_kernel)[1] == {"window_size": (127, 0)}
