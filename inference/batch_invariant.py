"""Batch-invariant linear layers for vLLM on CPU (`deterministic = true`).

vLLM's batch-invariant kernels (`VLLM_BATCH_INVARIANT=1`) exist for CUDA and XPU only. On CPU
every linear layer (lm_head included) goes through `cpu_unquantized_gemm`, and its kernels
(oneDNN, MKL) pick their blocking by the number of rows M: measured on SmolLM2-135M in fp32, a
row's result is the same bit for bit for every M >= 4 (up to 2048 rows tried), but M = 1 (and
for plain torch.linear M = 2) takes another kernel and differs in the low bits. Decode batches
shrink to one or two sequences at the end of a step, so a request's logprobs depended on what
finished before it. Padding every input to at least MIN_ROWS rows (zeros, cut off afterwards)
keeps each row on the kernel that larger batches use: the logits of a request no longer depend
on what it is batched with, for the price of a few padded rows in tiny batches. Where that
bound lies depends on the machine's kernels (an AVX2 CPU's oneDNN blocks otherwise than an
AVX-512 one's), so each layer measures its own once, on its first product: the smallest row
count from which every batch size tried (1-32, 48, 64, 128, 256) gives each row the bits of a
512-row batch, and never fewer than MIN_ROWS (`min_rows_for`).

Attention has the same trap: vLLM's CPU attention splits a sequence's keys and values over
threads when the batch has fewer sequences than threads (`VLLM_CPU_ATTN_SPLIT_KV`, on by
default) and sums the parts, so a request's logprobs changed in the last bit with the number of
requests it was scheduled with (measured on the tiny test model: 3-4 of 24 rounds of 8 requests
with random arrival times differed by 9.5e-7, with the split off none;
tests/integration/test_batch_invariant_server.py). A deterministic run
turns the split off (`SPLIT_KV_ENV`), in the inference server and so in every process it forks.

Installed by the vLLM plugin (inference/vllm_plugin.py) in every vLLM process when
BATCH_INVARIANT_ENV is set; the inference server sets it for a deterministic run.
"""

import os

from inference.patches import VLLM_SUPPORTED, require_version, tagged

BATCH_INVARIANT_ENV = "RL_CPU_BATCH_INVARIANT"
SPLIT_KV_ENV = "VLLM_CPU_ATTN_SPLIT_KV"
MIN_ROWS = 8
"""The fewest rows any layer computes (its own measured bound may be higher)."""


def enabled() -> bool:
    return os.environ.get(BATCH_INVARIANT_ENV) == "1"


PROBE_ROWS = (*range(1, 33), 48, 64, 128, 256)
REFERENCE_ROWS = 512


def min_rows_for(product, in_features: int, dtype) -> int:
    """The smallest row count from which `product` (x -> x @ W.T + b of one layer) gives every
    row of a batch the bits it has in a REFERENCE_ROWS batch, for each size in PROBE_ROWS;
    at least MIN_ROWS. Inputs are seeded random rows: what is measured is the kernel."""
    import torch

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(REFERENCE_ROWS, in_features, generator=generator).to(dtype)
    reference = product(x)
    differ = [m for m in PROBE_ROWS if not torch.equal(product(x[:m].contiguous()), reference[:m])]
    return max(MIN_ROWS, max(differ, default=0) + 1)


def install() -> None:
    """Wrap vLLM's CPU GEMM so that no input has fewer rows than its layer's measured bound; a
    ConfigError on a vLLM it was not written for."""
    require_version(
        "vllm", VLLM_SUPPORTED, "the batch-invariant CPU gemm (inference/batch_invariant.py)"
    )
    import torch
    from vllm.model_executor.layers import utils

    original = utils.cpu_unquantized_gemm
    if getattr(original, "batch_invariant", False):
        return
    bounds: dict[int, int] = {}  # id(layer) -> its min rows

    def padded_gemm(layer, x, weight, bias=None):
        if x.dim() != 2:
            return original(layer, x, weight, bias)
        key = id(layer)
        if key not in bounds:
            bounds[key] = min_rows_for(
                lambda rows: original(layer, rows, weight, bias), x.shape[1], x.dtype
            )
        rows, min_rows = x.shape[0], bounds[key]
        if rows >= min_rows:
            return original(layer, x, weight, bias)
        full = torch.zeros((min_rows, x.shape[1]), dtype=x.dtype, device=x.device)
        full[:rows] = x
        return original(layer, full, weight, bias)[:rows]

    utils.cpu_unquantized_gemm = tagged(padded_gemm, batch_invariant=True, bounds=bounds)
