"""The chunked logprob head: per-token logprobs and entropy of the target tokens, straight from
the final hidden states, `chunk` tokens at a time, only at the positions the loss uses. The
[tokens x vocab] logits never exist in fp32 for the whole row: forward keeps one logsumexp per
token, backward recomputes each chunk's logits (online, like forward) and accumulates the
gradients of the hidden states and of the head's weight and bias.

The head must give the same logits as the model's own `forward`, which for some architectures
is more than `hidden @ lm_head.weight.T`: a bias (Phi), a scale (Granite divides by
`logits_scaling`, Cohere multiplies by `logit_scale`), a final-logit softcap (Gemma-2/3).
`HEAD_TRANSFORMS` lists the architectures whose head is verified against their HF forward
(tests/unit/trainer/test_families.py) and reads each one's transform from its config; any
other architecture keeps its own head, unchunked, and the log says so.

It runs inside the model's forward (the model's `forward` answers a `LogprobRequest` set just
before the call: the decoder runs as usual, then this head instead of the model's), so FSDP2 has
the head's weight gathered whenever it is used, in forward and in backward, and the state dict
keeps its keys."""

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from trainer.model_type import TrainerModel

logger = logging.getLogger("trainer")


@dataclass
class LogprobRequest:
    targets: torch.Tensor
    """[T] the next token at each position."""
    mask: torch.Tensor
    """[T] bool: positions whose logprob the loss uses."""
    temperature: float


@dataclass(frozen=True)
class HeadTransform:
    """What an architecture's forward does to `hidden @ W.T + b` before returning logits:
    logits = softcap * tanh(scale * z / softcap) (just scale * z without a softcap)."""

    scale: float = 1.0
    softcap: float | None = None

    def apply(self, z: torch.Tensor) -> torch.Tensor:
        y = z * self.scale if self.scale != 1.0 else z
        if self.softcap is not None:
            y = torch.tanh(y / self.softcap) * self.softcap
        return y

    def derivative(self, z: torch.Tensor) -> torch.Tensor | float:
        """d logits / d z, elementwise."""
        if self.softcap is None:
            return self.scale
        t = torch.tanh(z * (self.scale / self.softcap))
        return self.scale * (1 - t * t)

    def describe(self) -> str:
        parts = [f"scale {self.scale:g}"] if self.scale != 1.0 else []
        parts += [f"final-logit softcap {self.softcap:g}"] if self.softcap is not None else []
        return ", ".join(parts) or "none"


def plain(config) -> HeadTransform:
    return HeadTransform()


def granite(config) -> HeadTransform:
    return HeadTransform(scale=1.0 / config.logits_scaling)


def cohere(config) -> HeadTransform:
    return HeadTransform(scale=config.logit_scale)


def gemma_softcap(config) -> HeadTransform:
    return HeadTransform(softcap=config.final_logit_softcapping)


# Architecture -> its head transform, read from the (text) config. Every entry is checked
# against the HF forward of a tiny random model in tests/unit/trainer/test_families.py; a bias
# on `lm_head` is taken from the layer itself, whatever the architecture.
HEAD_TRANSFORMS: dict[str, Callable[..., HeadTransform]] = {
    "LlamaForCausalLM": plain,
    "MistralForCausalLM": plain,
    "Qwen2ForCausalLM": plain,
    "Qwen3ForCausalLM": plain,
    "GemmaForCausalLM": plain,
    "Gemma2ForCausalLM": gemma_softcap,
    "Gemma3ForCausalLM": gemma_softcap,
    "GraniteForCausalLM": granite,
    "CohereForCausalLM": cohere,
    "Cohere2ForCausalLM": cohere,
    "PhiForCausalLM": plain,
    "Phi3ForCausalLM": plain,
    "Olmo2ForCausalLM": plain,
    "StableLmForCausalLM": plain,
    "Starcoder2ForCausalLM": plain,
}


def head_transform(model: TrainerModel) -> HeadTransform | None:
    """The verified transform of this model's head, or None for an architecture not in
    `HEAD_TRANSFORMS` (its own forward must compute the logits)."""
    build = HEAD_TRANSFORMS.get(type(model).__name__)
    return None if build is None else build(model.config.get_text_config())


class ChunkedLogprobs(torch.autograd.Function):
    """(hidden [N, H], weight [V, H], bias [V] or None, targets [N]) -> logprobs [N] fp32,
    entropy [N] fp32 (no gradient), with the head's matmul in `dtype` and the transform,
    temperature and normalisation in fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, temperature, chunk, dtype, transform):
        w = weight.to(dtype)
        logprobs = torch.empty(len(hidden), dtype=torch.float32, device=hidden.device)
        entropy = torch.empty_like(logprobs)
        lse = torch.empty_like(logprobs)
        for start in range(0, len(hidden), chunk):
            end = start + chunk
            z = head_logits(hidden[start:end], w, bias, dtype)
            logits = scaled(z, transform, temperature)
            lse[start:end] = torch.logsumexp(logits, dim=-1)
            probs = (logits - lse[start:end, None]).exp_()
            logprobs[start:end] = logits.gather(1, targets[start:end, None])[:, 0] - lse[start:end]
            entropy[start:end] = lse[start:end] - (probs * logits).sum(-1)
        ctx.save_for_backward(hidden, weight, bias, targets, lse)
        ctx.temperature, ctx.chunk, ctx.dtype, ctx.transform = temperature, chunk, dtype, transform
        ctx.mark_non_differentiable(entropy)
        return logprobs, entropy

    @staticmethod
    def backward(ctx, grad_logprobs, _grad_entropy):
        hidden, weight, bias, targets, lse = ctx.saved_tensors
        dtype, temperature, transform = ctx.dtype, ctx.temperature, ctx.transform
        w = weight.to(dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = None  # fp32, the first chunk's product cast (no zeros to add it to)
        grad_bias = None if bias is None else torch.zeros(bias.shape, device=bias.device)
        for start in range(0, len(hidden), ctx.chunk):
            end = start + ctx.chunk
            h = hidden[start:end].to(dtype)
            z = head_logits(h, w, bias, dtype)
            derivative = transform.derivative(z)  # before `scaled` overwrites z
            logits = scaled(z, transform, temperature)
            g = grad_logprobs[start:end].float()
            # d logprob(target) / d logits = onehot(target) - softmax; then through the
            # temperature and the head's transform back to z = h @ W.T + b. In place: each
            # [chunk x vocab] fp32 temporary is the size of the whole chunk's logits.
            dz = logits.sub_(lse[start:end, None]).exp_().mul_(-g[:, None])
            dz.scatter_add_(1, targets[start:end, None], g[:, None])
            dz.mul_(derivative / temperature)
            if grad_bias is not None:
                grad_bias += dz.sum(0)
            dz = dz.to(dtype)
            grad_hidden[start:end] = (dz @ w).to(hidden.dtype)
            product = dz.T @ h
            grad_weight = product.float() if grad_weight is None else grad_weight.add_(product)
        if grad_weight is None:  # no position to take a gradient from
            grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        if grad_bias is not None:
            grad_bias = grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight.to(weight.dtype), grad_bias, None, None, None, None, None


def scaled(z: torch.Tensor, transform: HeadTransform, temperature: float) -> torch.Tensor:
    """The logits over the temperature: in place on z when the transform returns z itself (a
    [chunk x vocab] fp32 copy fewer)."""
    logits = transform.apply(z)
    return logits.div_(temperature) if logits is z else logits / temperature


def head_logits(h: torch.Tensor, w: torch.Tensor, bias, dtype: torch.dtype) -> torch.Tensor:
    """z = h @ W.T (+ b) for one chunk: matmul in `dtype`, result in fp32."""
    z = (h.to(dtype) @ w.T).float()
    return z if bias is None else z + bias.float()


def head_parameters(head: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The head's effective weight and bias, differentiable: a LoRA adapter on the head is
    folded into the weight (trainer/lora.py), so its A and B get their gradients through it."""
    merged = getattr(head, "merged_weight", None)
    weight, bias = (merged() if merged is not None else head.weight), head.bias
    assert isinstance(weight, torch.Tensor) and not isinstance(bias, nn.Module), "a linear head"
    return weight, bias


def chunking_blocker(model: TrainerModel) -> str | None:
    """Why the chunked head cannot stand in for this model's own head, or None if it can."""
    name = type(model).__name__
    if name not in HEAD_TRANSFORMS:
        return (
            f"{name} is not among the architectures whose head transform is verified "
            "(trainer/logprob_head.py HEAD_TRANSFORMS)"
        )
    head = model.get_output_embeddings()
    dropout = getattr(head, "lora_dropout", None)
    if dropout is not None and not isinstance(dropout, nn.Identity):
        return "lm_head has a LoRA adapter with dropout (lora.dropout > 0)"
    return None


def install(model: TrainerModel, chunk: int, dtype: torch.dtype) -> bool:
    """Make the model answer `model.logprob_request` (a LogprobRequest) with [1, T, 2]
    (logprob, entropy) as its `logits` instead of computing full logits; with no request it
    runs its own forward. Returns False (and logs why) when this model's head cannot be
    chunked: it then always computes full logits with its own forward."""
    model.logprob_request = None
    blocker = chunking_blocker(model)
    if blocker is not None:
        logger.info(f"logprob head: the model's own, unchunked: {blocker}")
        return False
    from transformers.modeling_outputs import CausalLMOutputWithPast

    transform = head_transform(model)
    assert transform is not None, "chunking_blocker found its architecture in HEAD_TRANSFORMS"
    head, decoder, plain_forward = model.get_output_embeddings(), model.get_decoder(), model.forward

    def forward(*args, **kwargs):
        request: LogprobRequest | None = model.logprob_request
        if request is None:
            return plain_forward(*args, **kwargs)
        hidden = decoder(*args, **kwargs).last_hidden_state
        return CausalLMOutputWithPast(logits=answer(hidden, request))

    def answer(hidden: torch.Tensor, request: LogprobRequest) -> torch.Tensor:
        rows = hidden[0]
        index = request.mask.nonzero()[:, 0]
        weight, bias = head_parameters(head)
        with torch.autocast(rows.device.type, enabled=False):
            logprobs, entropy = ChunkedLogprobs.apply(
                rows[index],
                weight,
                bias,
                request.targets[index],
                request.temperature,
                chunk,
                dtype,
                transform,
            )
        size = (rows.shape[0],)
        full = torch.zeros(size, dtype=torch.float32, device=rows.device)
        full = full.index_put((index,), logprobs)
        entropies = torch.zeros(size, dtype=torch.float32, device=rows.device)
        entropies = entropies.index_put((index,), entropy)
        return torch.stack([full, entropies], dim=-1)[None]

    model.forward = forward
    lora = " (its LoRA adapter folded in)" if hasattr(head, "merged_weight") else ""
    bias = ", bias" if head.bias is not None else ""
    logger.info(
        f"logprob head: chunked, {chunk} tokens at a time; head transform of "
        f"{type(model).__name__}: {transform.describe()}{bias}{lora}"
    )
    return True


def request_logprobs(model: TrainerModel, request: LogprobRequest | None) -> None:
    model.logprob_request = request


def uses_chunked_head(model: TrainerModel) -> bool:
    return getattr(model, "chunked_head", False)
