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
