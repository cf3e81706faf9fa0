"""bf16 linear layers for an fp32 model served on CPU (`inference.cpu.matmul_dtype`).

The trainer computes its forward under bf16 autocast from fp32 master weights: every linear
layer (the tied head included) multiplies bf16-rounded inputs by bf16-rounded weights and
rounds its output to bf16, while the embedding, the norms and the residual stream stay fp32.
Served in fp32, vLLM computes those products from unrounded operands, so the policy it samples
from is not quite the one the trainer scores. With this switch on, each fp32 linear layer keeps
a oneDNN-packed bf16 copy of its weight instead of an fp32 one and computes
`bf16(x) @ bf16(W).T (+ bf16(b))`, handing an fp32 copy of the bf16 result to the rest of the
fp32 model. Measured on SmolLM2-135M's shapes (2 threads): the same bits as the trainer's
autocast `F.linear` at every shape tried, row for row whatever the batch (M = 1..79 against
512), 1.3-1.8x faster than the fp32 product (the tied head at 32 rows 5.5 ms against 10.0),
and the packed weights take half the memory (0.2 GiB instead of 0.4 on SmolLM2-135M).

Installed by the vLLM plugin (inference/vllm_plugin.py) in every vLLM process; the inference
server sets MATMUL_ENV when it serves on CPU with `matmul_dtype = bfloat16`. vLLM's weight
reload runs the same dispatch again, so each new policy is packed the same way."""

import logging
import os

from inference.patches import VLLM_SUPPORTED, require_version, tagged

logger = logging.getLogger("inference")

MATMUL_ENV = "RL_CPU_MATMUL_DTYPE"
BF16 = "bfloat16"


def enabled() -> bool:
    return os.environ.get(MATMUL_ENV) == BF16


def install() -> None:
    """Wrap vLLM's CPU linear dispatch: fp32 2-D weights get a bf16 oneDNN kernel when
    MATMUL_ENV says so, and a layer that keeps its weight (an embedding) is packed on its
    first product only (see `dispatch`). Installing again picks up a changed MATMUL_ENV. A
    ConfigError on a vLLM it was not written for."""
    require_version(
        "vllm", VLLM_SUPPORTED, "the CPU linear layers' dispatch (inference/cpu_matmul.py)"
    )
    from vllm.model_executor.layers import utils

    current = utils.dispatch_cpu_unquantized_gemm
    vllm_dispatch = getattr(current, "vllm_dispatch", current)
    bf16 = enabled()

    def pack(layer, remove_weight: bool) -> None:
        if not (bf16 and pack_bf16(layer, remove_weight)):
            vllm_dispatch(layer, remove_weight)

    def dispatch(layer, remove_weight: bool) -> None:
        """vLLM packs every layer with a weight matrix, also an embedding, which keeps its
        weight for lookups (`remove_weight=False`): a tied-embedding model's input embedding
        got a packed copy beside the head's that nothing multiplies by (54 MiB in bf16, 108
        in fp32 on SmolLM2-135M). Such a layer is packed when it first multiplies instead."""
        if remove_weight:
            pack(layer, True)
        else:
            pack_on_first_product(layer, pack)

    utils.dispatch_cpu_unquantized_gemm = tagged(dispatch, vllm_dispatch=vllm_dispatch)


def check_bf16() -> str | None:
    """Why this process cannot build a bf16 oneDNN matmul (a trial on a small matrix), or
    None when it can."""
    import torch
    from vllm import _custom_ops as ops

    if not ops._supports_onednn:
        return None  # pack_bf16 falls back to float32 and says so
    try:
        ops.create_onednn_mm(torch.zeros(32, 32, dtype=torch.bfloat16), 32)
    except RuntimeError as err:
        return (
            f"cpu.matmul_dtype = bfloat16: oneDNN cannot build a bf16 matmul on this CPU "
            f"({str(err).split('.')[0]}): set cpu.matmul_dtype = auto or model"
        )
    return None


def pack_on_first_product(layer, pack) -> None:
    def first_product(x, weight, bias):
        pack(layer, False)  # replaces layer.cpu_linear
        return layer.cpu_linear(x, weight, bias)

    layer.cpu_linear = first_product


def pack_bf16(layer, remove_weight: bool) -> bool:
    """Give `layer` a bf16 oneDNN kernel; False (nothing changed) where it does not apply: a
    weight that is not a materialized fp32 matrix, or no oneDNN in this vLLM build."""
    import torch
    from vllm import _custom_ops as ops

    weight = layer.weight
    if weight.is_meta or weight.ndim != 2 or weight.dtype != torch.float32:
        return False
    if not ops._supports_onednn:
        logger.warning(
            "cpu.matmul_dtype = bfloat16: this vLLM build has no oneDNN, so linear layers "
            "compute in float32"
        )
        return False
    handler = ops.create_onednn_mm(weight.detach().to(torch.bfloat16).t(), 32)

    def linear(x, _weight, bias):
        bias = None if bias is None else bias.to(torch.bfloat16)
        return ops.onednn_mm(handler, x.to(torch.bfloat16), bias).to(x.dtype)

    layer.cpu_linear = linear
    if remove_weight:
        layer.weight = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype), requires_grad=False)
    return True
