"""inference/batch_invariant.py measures each layer's row bound on the machine it runs on: a
kernel that computes small batches another way (as oneDNN and MKL do below some row count,
which differs between AVX2 and AVX-512) gets inputs padded past that count."""

import torch

from inference.batch_invariant import MIN_ROWS, min_rows_for

WEIGHT = torch.randn(24, 40, generator=torch.Generator().manual_seed(1))


def rowwise(x, dtype=torch.float32):
    """x @ W.T one row at a time (no GEMM, whose own blocking depends on the batch here)."""
    return (x.to(dtype)[:, None, :] * WEIGHT.to(dtype)).sum(-1).float()


def switching_kernel(below: int):
    """x @ W.T, computed in float64 (other low bits) for batches of fewer than `below` rows."""
    return lambda x: rowwise(x, torch.float64) if x.shape[0] < below else rowwise(x)


def test_the_bound_is_where_the_kernel_switches():
    assert min_rows_for(switching_kernel(12), 40, torch.float32) == 12
    assert min_rows_for(switching_kernel(30), 40, torch.float32) == 30


def test_never_below_the_floor():
    assert min_rows_for(switching_kernel(0), 40, torch.float32) == MIN_ROWS


def test_a_kernel_that_differs_at_a_large_size_gets_a_bound_past_it():
    def product(x):
        return rowwise(x, torch.float64) if x.shape[0] == 64 else rowwise(x)

    assert min_rows_for(product, 40, torch.float32) == 65
