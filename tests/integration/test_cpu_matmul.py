"""bf16 linear layers in an fp32 model served on CPU (`inference.cpu.matmul_dtype = bfloat16`,
inference/cpu_matmul.py): each layer gives the trainer's autocast `F.linear` bit for bit, and a
real server serves the logprobs of an fp32 model whose linear layers compute so, before and
after a weight update."""

import shutil

import pytest

from rlcore.contracts.protocol import UPDATE_WEIGHTS_ROUTE
from rlcore.host.machine import probe
from rlcore.runs.rundir import RunDir
from tests.inference_process import InferenceProcess
from tests.integration.helpers import free_port
from tests.integration.test_inference_server import (
    PROMPT_IDS,
    max_diff,
    perturbed_copy,
    prompt_logprobs,
)

pytestmark = [
    pytest.mark.integration,
    # On AVX2 oneDNN has no bf16 matmul: what happens there is tests/integration/
    # test_machine_paths.py's (the refusal before vLLM starts).
    pytest.mark.skipif(not probe().bf16_matmul, reason="no oneDNN bf16 matmul on this CPU"),
]

# (rows, in, out): SmolLM2-135M's projections and tied head, the tiny test model's, one row
SHAPES = [(1, 576, 1536), (7, 1536, 576), (33, 576, 192), (64, 576, 49152), (5, 64, 96)]


class Layer:
    """What vLLM's CPU linear dispatch sees of a layer: `weight`, `bias`, and it sets
    `cpu_linear`."""

    def __init__(self, weight, bias):
        import torch

        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = bias


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_a_packed_layer_gives_autocast_linear_bit_for_bit(shape, with_bias):
    import torch

    from inference.cpu_matmul import pack_bf16

    rows, fan_in, fan_out = shape
    gen = torch.Generator().manual_seed(rows * fan_out)
    weight = torch.randn(fan_out, fan_in, generator=gen) * 0.05
    bias = torch.randn(fan_out, generator=gen) if with_bias else None
    x = torch.randn(rows, fan_in, generator=gen)
    layer = Layer(weight.clone(), bias)
    assert pack_bf16(layer, remove_weight=True)
    assert layer.weight.numel() == 0  # the fp32 weight is gone; the packed bf16 copy remains
    served = layer.cpu_linear(x, layer.weight, bias)
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        trained = torch.nn.functional.linear(x, weight, bias)
    assert served.dtype == torch.float32
    assert torch.equal(served, trained.float())
    # and not what an fp32 product gives: the switch changes the numbers
    assert not torch.equal(served, torch.nn.functional.linear(x, weight, bias))
    # each row the same whatever it is batched with
    assert torch.equal(layer.cpu_linear(x[:1], layer.weight, bias), served[:1])


def test_layers_it_does_not_apply_to_are_left_to_vllm():
    import torch

    from inference.cpu_matmul import pack_bf16

    for weight in (torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(4, 1, 8)):
        layer = Layer(weight, None)
        assert not pack_bf16(layer, remove_weight=True)
        assert layer.weight.shape == weight.shape and not hasattr(layer, "cpu_linear")


@pytest.mark.parametrize("matmul_dtype", ["bfloat16", None])
def test_a_layer_that_keeps_its_weight_is_packed_at_its_first_product(matmul_dtype, monkeypatch):
    """An embedding keeps its weight for lookups and multiplies only if it is the head, so the
    dispatch packs it when it first multiplies, from the weight it holds then (a reload copies
    the new values into the old tensor after the dispatch), as an eager pack would have."""
    import torch
    from vllm.model_executor.layers import utils

    from inference import cpu_matmul

    if matmul_dtype:
        monkeypatch.setenv(cpu_matmul.MATMUL_ENV, matmul_dtype)
    else:
        monkeypatch.delenv(cpu_matmul.MATMUL_ENV, raising=False)
    monkeypatch.setattr(utils, "dispatch_cpu_unquantized_gemm", utils.dispatch_cpu_unquantized_gemm)
    cpu_matmul.install()
    cpu_matmul.install()  # twice is once: vLLM's own dispatch stays underneath
    dispatch = utils.dispatch_cpu_unquantized_gemm
    gen = torch.Generator().manual_seed(3)
    weight, x = torch.randn(96, 64, generator=gen), torch.randn(5, 64, generator=gen)
    layer = Layer(torch.zeros_like(weight), None)
    dispatch(layer, remove_weight=False)
    lazy = layer.cpu_linear
    layer.weight.data.copy_(weight)  # after the dispatch, as vLLM's layerwise reload does
    served = layer.cpu_linear(x, layer.weight, None)
    assert layer.cpu_linear is not lazy and layer.weight.shape == weight.shape
    eager = Layer(weight.clone(), None)
    dispatch.vllm_dispatch(eager, remove_weight=False)
    if matmul_dtype:
        assert cpu_matmul.pack_bf16(eager, remove_weight=False)
    assert torch.equal(served, eager.cpu_linear(x, eager.weight, None))
    assert torch.equal(layer.cpu_linear(x, layer.weight, None), served)


def bf16_linear_logprobs(folder) -> list[float]:
    """transformers' fp32 forward of `folder` with every linear layer (the tied head included)
    computed as autocast does: what the server computes with bf16 matmuls."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)

    def linear(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            return torch.nn.functional.linear(x, self.weight, self.bias).float()

    for module in model.modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = linear.__get__(module)
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([PROMPT_IDS])).logits.float(), dim=-1)[0]
    return [logprobs[i, tok].item() for i, tok in enumerate(PROMPT_IDS[1:])]


def test_a_server_with_bf16_matmuls_serves_them_before_and_after_an_update(
    tiny_model_dir, tmp_path
):
    from tests.integration.test_inference_server import hf_prompt_logprobs

    run = tmp_path / "run"
    RunDir(run).claim()
    shutil.copytree(tiny_model_dir, run / "weights/step_0")
    perturbed_copy(tiny_model_dir, run / "weights/step_1", scale=0.05, seed=1)
    config = tmp_path / "infer.toml"
    config.write_text(
        f'output_dir = "{run}"\n[model]\nname = "{tiny_model_dir}"\ndtype = "float32"\n'
        'max_model_len = 512\n[cpu]\nkvcache_space_gib = 0.25\nmatmul_dtype = "bfloat16"\n'
    )
    server = InferenceProcess(
        ["@", str(config), "--server.port", str(free_port())], tmp_path / "inf.log"
    )
    server.start()
    try:
        server.wait_ready(timeout_s=600)
        base = prompt_logprobs(server.url)
        assert max_diff(base, bf16_linear_logprobs(tiny_model_dir)) < 1e-4
        assert max_diff(base, hf_prompt_logprobs(tiny_model_dir)) > 1e-3  # not fp32 products
        status, body = server.admin_post(
            UPDATE_WEIGHTS_ROUTE, {"weight_dir": str(run / "weights/step_1")}
        )
        assert status == 200, body
        served = prompt_logprobs(server.url)
        assert max_diff(served, bf16_linear_logprobs(run / "weights/step_1")) < 1e-4
    finally:
        server.stop(grace_s=30)
