"""Batch-invariant linear layers for vLLM on CPU (`deterministic = true`).

vLLM's batch-invariant kernels (`VLLM_BATCH_INVARIANT=1`) exist for CUDA and XPU only. On CPU
every linear layer (lm_head included) goes through `cpu_unquantized_gemm`, and its kernels
(oneDNN, MKL) pick their blocking by the number of rows M: measured on SmolLM2-135M in fp32, a
row's result is the same bit for bit for every M >= 4 (up to 2048 rows tried), but M = 1 (and
for plain torch.linear M = 2) takes another kernel and differs in the low bits. Decode batches
shrink to one or two sequences at the end of a step, so a request's logprobs depended on what
finished before it. Padding every input to at least MIN_ROWS rows (zeros, cut off afterwards)
keeps each row on the kernel that larger batches use: the logits of a request no longer depend
on what it is batched with, for the price of a few padded rows in tiny batches.

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

BATCH_INVARIANT_ENV = "RL_CPU_BATCH_INVARIANT"
SPLIT_KV_ENV = "VLLM_CPU_ATTN_SPLIT_KV"
MIN_ROWS = 8


def enabled() -> bool:
    return os.environ.get(BATCH_INVARIANT_ENV) == "1"


def install() -> None:
    """Wrap vLLM's CPU GEMM so that no input has fewer than MIN_ROWS rows."""
    import torch
    from vllm.model_executor.layers import utils

    original = utils.cpu_unquantized_gemm
    if getattr(original, "batch_invariant", False):
        return

    def padded_gemm(layer, x, weight, bias=None):
        rows = x.shape[0]
        if x.dim() != 2 or rows >= MIN_ROWS:
            return original(layer, x, weight, bias)
        full = torch.zeros((MIN_ROWS, x.shape[1]), dtype=x.dtype, device=x.device)
        full[:rows] = x
        return original(layer, full, weight, bias)[:rows]

    padded_gemm.batch_invariant = True
    utils.cpu_unquantized_gemm = padded_gemm
