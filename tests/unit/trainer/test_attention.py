"""Packed rows: every attention implementation attends within each sample only, and `auto`
picks the kernel the machine has."""

import inspect
import logging

import pytest
import torch
from test_trainer_data import random_batch

from rlcore.errors import ConfigError
from rlcore.protocol import BatchTensors
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


def torch_2_10_kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None,
                      is_causal=False):  # fmt: skip
    assert is_causal and k.shape[1] == q.shape[1], "torch 2.10's kernel: causal, no GQA"
    return attention.per_sample_sdpa(q, k, v, cu_q.tolist(), scale, -1)


def torch_2_11_kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None,
                      window_size=(-1, -1)):  # fmt: skip
    assert k.shape[1] == q.shape[1], "torch 2.11's kernel has no enable_gqa"
    return attention.per_sample_sdpa(q, k, v, cu_q.tolist(), scale, window_size[0])


def torch_2_13_kernel(q, k, v, cu_q, cu_k, max_q, max_k, *, return_aux=None, scale=None,
                      window_size=(-1, -1), enable_gqa=False):  # fmt: skip
    assert enable_gqa == (k.shape[1] != q.shape[1])
    return attention.per_sample_sdpa(q, k, v, cu_q.tolist(), scale, window_size[0])


@pytest.mark.parametrize("kernel", [torch_2_10_kernel, torch_2_11_kernel, torch_2_13_kernel])
@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_each_torchs_varlen_signature_gets_the_same_grouped_attention(kernel, kv_heads):
    """The keywords differ between torch releases (the GPU machine's torch 2.11 has no
    enable_gqa): every one gets causal attention within each sample, query heads sharing
    their group's key/value head as sdpa's enable_gqa shares them."""
    torch.manual_seed(0)
    q, k, v = torch.randn(9, 4, 8), torch.randn(9, kv_heads, 8), torch.randn(9, kv_heads, 8)
    cu_seqlens = torch.tensor([0, 3, 5, 9], dtype=torch.int32)
    choice = attention.varlen_options(kernel, inspect.signature(kernel).parameters, (-1, 0))
    out = attention.call_varlen(choice, q, k, v, cu_seqlens, 4, 0.5)
    expected = attention.per_sample_sdpa(q, k, v, cu_seqlens.tolist(), 0.5, -1)
    torch.testing.assert_close(out, expected)


def test_a_sliding_window_on_torch_2_10_takes_the_per_sample_path():
    def options(kernel):
        return attention.varlen_options(kernel, inspect.signature(kernel).parameters, (127, 0))

    assert options(torch_2_10_kernel) is None
    assert options(torch_2_11_kernel)[1] == {"window_size": (127, 0)}
