"""Batch-invariant CPU linear layers (`deterministic = true`): vLLM's CPU GEMM gives a row
the same bits whatever else is in the batch once inputs have at least the rows each layer
measured for itself (never fewer than MIN_ROWS)."""

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
        return (x[:, None, :] * weight).sum(-1)  # row by row: no bound above the floor

    monkeypatch.setattr(vllm_utils, "cpu_unquantized_gemm", gemm)
    batch_invariant.install()
    batch_invariant.install()  # twice is once
    weight = torch.randn(3, 4)
    vllm_utils.cpu_unquantized_gemm(None, torch.ones(20, 4), weight)  # measures the bound
    assert vllm_utils.cpu_unquantized_gemm.bounds == {id(None): batch_invariant.MIN_ROWS}
    shapes.clear()
    for rows in (1, 7, 8, 20):
        out = vllm_utils.cpu_unquantized_gemm(None, torch.ones(rows, 4), weight)
        assert out.shape == (rows, 3)
        assert torch.equal(out, (torch.ones(rows, 4)[:, None, :] * weight).sum(-1))
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


def test_torch_linear_on_this_machine_gets_a_bound_that_makes_rows_invariant(
    vllm_utils, monkeypatch
):
    """torch's own F.linear (MKL) computes batches of fewer than 12 rows otherwise on the
    AVX-512 EPYC this was measured on: whatever the machine's bound, once measured, every
    batch size gives a row the bits of a large batch."""
    import torch

    torch.manual_seed(0)
    weight, x = torch.randn(576, 1536), torch.randn(300, 1536)
    layer = type("Layer", (), {"cpu_linear": None})()
    linear = torch.nn.functional.linear
    monkeypatch.setattr(vllm_utils, "cpu_unquantized_gemm", lambda _, x, w, b=None: linear(x, w, b))
    batch_invariant.install()
    gemm = vllm_utils.cpu_unquantized_gemm
    reference = gemm(layer, x, weight)
    assert gemm.bounds[id(layer)] >= batch_invariant.MIN_ROWS
    for rows in (*range(1, 40), 100, 299):
        assert torch.equal(gemm(layer, x[:rows], weight), reference[:rows]), rows


def test_vllms_cpu_layers_get_the_padded_gemm(vllm_utils):
    """The patch takes effect where vLLM multiplies: a linear layer built after it computes
    through the padded gemm, as vLLM's embedding-as-head does (inference/patches.py)."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    batch_invariant.install()
    assert vllm_utils.dispatch_unquantized_gemm() is vllm_utils.cpu_unquantized_gemm
    assert UnquantizedLinearMethod()._gemm_impl.batch_invariant
