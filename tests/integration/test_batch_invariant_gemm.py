"""Batch-invariant CPU linear layers (`deterministic = true`): vLLM's CPU GEMM gives a row
the same bits whatever else is in the batch once inputs have at least MIN_ROWS rows."""

import pytest

from inference import batch_invariant

# Importing vLLM starts helper processes (and takes a minute on 2 cores): not a unit test.
# Slow: the default run's two --deterministic runs (test_determinism.py) go through it.
pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def vllm_utils(monkeypatch):
    from vllm.model_executor.layers import utils

    monkeypatch.setattr(utils, "cpu_unquantized_gemm", utils.cpu_unquantized_gemm)
    return utils


def test_small_inputs_are_padded_and_cut_back(vllm_utils, monkeypatch):
    import torch

    shapes = []

    def gemm(layer, x, weight, bias=None):
        shapes.append(tuple(x.shape))
        return x @ weight.t()

    monkeypatch.setattr(vllm_utils, "cpu_unquantized_gemm", gemm)
    batch_invariant.install()
    batch_invariant.install()  # twice is once
    weight = torch.randn(3, 4)
    for rows in (1, 7, 8, 20):
        out = vllm_utils.cpu_unquantized_gemm(None, torch.ones(rows, 4), weight)
        assert out.shape == (rows, 3)
        assert torch.equal(out, torch.ones(rows, 4) @ weight.t())
    assert shapes == [(8, 4), (8, 4), (8, 4), (20, 4)]


def test_a_row_has_the_same_bits_in_every_batch_size(vllm_utils):
    """The real kernel vLLM uses on CPU (oneDNN), on a down_proj-shaped weight whose one-row
    result differs without the padding."""
    import torch
    from vllm import _custom_ops as ops

    if not getattr(ops, "_supports_onednn", False):
        pytest.skip("this vLLM build has no oneDNN GEMM")
    torch.manual_seed(0)
    weight, x = torch.randn(576, 1536), torch.randn(64, 1536)
    handle = ops.create_onednn_mm(weight.t(), 32)
    layer = type("Layer", (), {"cpu_linear": lambda self, x, w, b: ops.onednn_mm(handle, x, b)})()
    batch_invariant.install()
    gemm = vllm_utils.cpu_unquantized_gemm
    reference = gemm(layer, x, weight)[0]
    assert all(torch.equal(gemm(layer, x[:rows], weight)[0], reference) for rows in (1, 2, 3, 9))
