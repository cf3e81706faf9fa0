"""The chunked logprob head against full logits: same logprobs, entropies and gradients."""

import pytest
import torch
from torch import nn

from trainer.logprob_head import ChunkedLogprobs, LogprobRequest, install, request_logprobs
from trainer.loss import token_logprobs


@pytest.mark.parametrize("chunk", [1, 3, 7, 64])
def test_values_and_gradients_match_full_logits(chunk):
    torch.manual_seed(0)
    hidden = torch.randn(7, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (7,))
    grad = torch.randn(7, dtype=torch.float64)

    logp, entropy = ChunkedLogprobs.apply(hidden, weight, targets, 0.7, chunk, torch.float64)
    (logp.double() * grad).sum().backward()
    chunked = (logp.detach(), entropy, hidden.grad.clone(), weight.grad.clone())

    hidden.grad = weight.grad = None
    full_logp, full_entropy = token_logprobs(hidden @ weight.T, targets, 0.7)
    (full_logp.double() * grad).sum().backward()
    full = (full_logp.detach(), full_entropy, hidden.grad, weight.grad)
    for a, b in zip(chunked, full, strict=True):  # both normalise in fp32
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=1e-4)


def test_the_installed_head_answers_only_masked_positions_and_keeps_plain_logits():
    torch.manual_seed(0)
    model = nn.Module()
    model.head = nn.Linear(8, 20, bias=False)
    model.get_output_embeddings = lambda: model.head
    hidden = torch.randn(1, 5, 8)
    plain = model.head(hidden)
    install(model, chunk=2, dtype=torch.float32)
    assert torch.equal(model.head(hidden), plain)  # no request: logits as before
    targets, mask = torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 1, 1, 0, 1]).bool()
    request_logprobs(model, LogprobRequest(targets, mask, 1.0))
    answer = model.head(hidden)[0]
    expected, _ = token_logprobs(plain[0], targets, 1.0)
    torch.testing.assert_close(answer[mask, 0], expected[mask], rtol=1e-5, atol=1e-6)
    assert torch.all(answer[~mask] == 0)
    assert set(model.state_dict()) == {"head.weight"}  # checkpoints keep their keys
