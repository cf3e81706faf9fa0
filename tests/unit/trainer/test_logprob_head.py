"""The chunked logprob head against full logits: same logprobs, entropies and gradients, with
every head transform (scale, final-logit softcap) and with a head bias."""

import sys
from pathlib import Path

import pytest
import torch

from trainer.logprob_head import (
    ChunkedLogprobs,
    HeadTransform,
    LogprobRequest,
    install,
    request_logprobs,
)
from trainer.loss import token_logprobs

TRANSFORMS = {
    "plain": HeadTransform(),
    "scale": HeadTransform(scale=0.25),
    "softcap": HeadTransform(softcap=3.0),
    "scale+softcap": HeadTransform(scale=2.0, softcap=5.0),
}


@pytest.mark.parametrize("transform", list(TRANSFORMS))
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_values_and_gradients_match_full_logits(chunk, with_bias, transform):
    torch.manual_seed(0)
    transform = TRANSFORMS[transform]
    hidden = (torch.randn(7, 16, dtype=torch.float64) * 2).requires_grad_()
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(50, dtype=torch.float64, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 50, (7,))
    grad = torch.randn(7, dtype=torch.float64)
    leaves = [t for t in (hidden, weight, bias) if t is not None]

    args = (hidden, weight, bias, targets, 0.7, chunk, torch.float64, transform)
    logp, entropy = ChunkedLogprobs.apply(*args)
    (logp.double() * grad).sum().backward()
    chunked = [logp.detach(), entropy] + [t.grad.clone() for t in leaves]

    for t in leaves:
        t.grad = None
    z = hidden @ weight.T + (bias if bias is not None else 0)
    full_logp, full_entropy = token_logprobs(transform.apply(z), targets, 0.7)
    (full_logp.double() * grad).sum().backward()
    full = [full_logp.detach(), full_entropy] + [t.grad for t in leaves]
    for a, b in zip(chunked, full, strict=True):  # both normalise in fp32
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-4)


def test_the_installed_head_answers_only_masked_positions_and_keeps_plain_logits():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from families import build_family_model

    model = build_family_model("llama", vocab_size=64)
    ids = torch.randint(0, 64, (1, 5))
    plain = model(input_ids=ids).logits
    keys = set(model.state_dict())
    assert install(model, chunk=2, dtype=torch.float32)
    torch.testing.assert_close(model(input_ids=ids).logits, plain)  # no request: as before
    targets, mask = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 1, 1, 0, 1]).bool()
    request_logprobs(model, LogprobRequest(targets, mask, 1.0))
    answer = model(input_ids=ids).logits[0]
    expected, _ = token_logprobs(plain[0], targets, 1.0)
    torch.testing.assert_close(answer[mask, 0], expected[mask], rtol=1e-5, atol=1e-5)
    assert torch.all(answer[~mask] == 0)
    assert set(model.state_dict()) == keys  # checkpoints keep their keys


def reference_backward(hidden, weight, targets, lse, grad, temperature, chunk, dtype):
    """The head's backward as first written (a fresh tensor for each step, the weight's
    gradient summed into zeros), for the bit-for-bit comparison below."""
    w = weight.to(dtype)
    grad_hidden = torch.empty_like(hidden)
    grad_weight = torch.zeros(weight.shape, dtype=torch.float32)
    for start in range(0, len(hidden), chunk):
        end = start + chunk
        h = hidden[start:end].to(dtype)
        logits = (h @ w.T).float() / temperature
        g = grad[start:end].float()
        dlogits = -torch.exp(logits - lse[start:end, None]) * g[:, None]
        dlogits.scatter_add_(1, targets[start:end, None], g[:, None])
        dz = (dlogits * (1.0 / temperature)).to(dtype)
        grad_hidden[start:end] = (dz @ w).to(hidden.dtype)
        grad_weight += (dz.T @ h).float()
    return grad_hidden, grad_weight


@pytest.mark.parametrize("chunk", [3, 64])
def test_in_place_backward_is_bit_for_bit_the_plain_one(chunk):
    """The backward works in place on its [chunk x vocab] temporaries (memory at the trainer's
    peak); in bf16 compute, as the quick start runs, its gradients equal the plain version's
    bit for bit."""
    torch.manual_seed(1)
    hidden = torch.randn(9, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets, grad = torch.randint(0, 50, (9,)), torch.randn(9)
    args = (hidden, weight, None, targets, 0.7, chunk, torch.bfloat16, HeadTransform())
    logp, _ = ChunkedLogprobs.apply(*args)
    (logp * grad).sum().backward()
    z = (hidden.detach().to(torch.bfloat16) @ weight.detach().to(torch.bfloat16).T).float()
    lse = torch.logsumexp(z / 0.7, dim=-1)
    expected = reference_backward(
        hidden.detach(), weight.detach(), targets, lse, grad, 0.7, chunk, torch.bfloat16
    )
    assert torch.equal(hidden.grad, expected[0])
    assert torch.equal(weight.grad, expected[1])


def test_no_loss_position_gives_zero_gradients():
    weight = torch.randn(50, 16, requires_grad=True)
    hidden = torch.randn(0, 16, requires_grad=True)
    args = (
        hidden,
        weight,
        None,
        torch.zeros(0, dtype=torch.long),
        1.0,
        4,
        torch.float32,
        HeadTransform(),
    )
    logp, _ = ChunkedLogprobs.apply(*args)
    logp.sum().backward()
    assert weight.grad is not None and not weight.grad.any()
