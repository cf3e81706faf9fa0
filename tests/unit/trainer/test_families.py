"""Every architecture family the trainer accepts: its logprobs equal the model's own HF forward
(fp32, eager attention, each sample alone) to 1e-4 nats per token, through the chunked head and
through full logits, with packed rows; tiny random models built offline (tests/families.py)."""

import logging
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from families import HEAD_FAMILIES  # noqa: E402
from test_trainer_data import packed_row  # noqa: E402

from rlcore.contracts.protocol import Sample  # noqa: E402
from trainer.config import LoraConfig, TrainerModelConfig  # noqa: E402
from trainer.logprob_head import HEAD_TRANSFORMS  # noqa: E402
from trainer.model import load_model  # noqa: E402
from trainer.parity import parity_causes  # noqa: E402
from trainer.train import forward_logprobs  # noqa: E402

VOCAB, TOLERANCE = 512, 1e-4
LENGTHS = [(5, 19), (3, 12), (4, 25)]  # (prompt, completion) per packed sample


def samples(seed: int = 0) -> list[Sample]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for num_prompt, num_completion in LENGTHS:
        ids = torch.randint(0, VOCAB, (num_prompt + num_completion,), generator=gen).tolist()
        out.append(
            Sample(
                ids[:num_prompt],
                ids[num_prompt:],
                [1] * num_completion,
                [0.0] * num_completion,
                advantage=1.0,
            )
        )
    return out


def reference_logprobs(model, batch: list[Sample], temperature: float) -> torch.Tensor:
    """Each sample alone through the model's own forward, eager attention, fp32: the logprob
    of every completion token, concatenated."""
    model.set_attn_implementation("eager")
    out = []
    with torch.no_grad():
        for s in batch:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logits = model(input_ids=ids).logits[0].float() / temperature
            logprobs = torch.log_softmax(logits, -1)[len(s.prompt_ids) - 1 : -1]
            out.append(logprobs.gather(1, torch.tensor(s.completion_ids)[:, None])[:, 0])
    return torch.cat(out)


def trainer_logprobs(model, world, batch: list[Sample], temperature: float) -> torch.Tensor:
    mb = packed_row(batch)  # one packed row
    with torch.no_grad():
        logprobs, _ = forward_logprobs(model, world, mb, temperature)
    return logprobs[mb.loss_mask]


def load(model_dir: Path, world, chunk: int | None, lora: LoraConfig | None = None, **fields):
    config = TrainerModelConfig(
        name=str(model_dir), dtype="float32", logprob_chunk_tokens=chunk, **fields
    )
    return load_model(config, str(model_dir), world, lora)


def test_every_listed_head_has_a_tiny_model(family_dirs):
    """HEAD_TRANSFORMS claims each architecture's head equals its HF forward: each has a tiny
    model in tests/families.py that the test below checks."""
    import json

    built = {
        json.loads((d / "config.json").read_text())["architectures"][0]
        for d in family_dirs.values()
    }
    assert built == set(HEAD_TRANSFORMS)


@pytest.mark.parametrize("chunk", [7, None], ids=["chunked", "full_logits"])
@pytest.mark.parametrize("family", HEAD_FAMILIES)
def test_trainer_logprobs_equal_the_hf_forward(family_dirs, cpu_world, family, chunk):
    from transformers import AutoModelForCausalLM

    batch, temperature = samples(), 0.7
    reference = reference_logprobs(
        AutoModelForCausalLM.from_pretrained(family_dirs[family]), batch, temperature
    )
    model = load(family_dirs[family], cpu_world, chunk)
    assert model.chunked_head == (chunk is not None)
    error = (trainer_logprobs(model, cpu_world, batch, temperature) - reference).abs().max()
    assert error < TOLERANCE, f"{family}: {error:.2e} nats"


def naive_logprobs(model, batch: list[Sample]) -> torch.Tensor:
    """`hidden @ lm_head.weight.T` and nothing else, eager attention: what the old head did."""
    model.set_attn_implementation("eager")
    out = []
    with torch.no_grad():
        for s in batch:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            hidden = model.get_decoder()(input_ids=ids).last_hidden_state[0]
            logits = hidden @ model.get_output_embeddings().weight.T
            logprobs = torch.log_softmax(logits, -1)[len(s.prompt_ids) - 1 : -1]
            out.append(logprobs.gather(1, torch.tensor(s.completion_ids)[:, None])[:, 0])
    return torch.cat(out)


@pytest.mark.parametrize("family", ["gemma2", "gemma3", "granite", "phi", "cohere", "cohere2"])
def test_the_tiny_models_make_the_head_transform_show(family_dirs, family):
    """Guards the test above: on these models, dropping the head's transform is far off."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(family_dirs[family])
    batch = samples()
    gap = (naive_logprobs(model, batch) - reference_logprobs(model, batch, 1.0)).abs().max()
    assert gap > 0.5, f"{family}: the head transform changes logprobs by only {gap:.3f}"


def test_gemma2_attention_softcap_needs_eager_on_cpu(family_dirs, cpu_world, caplog):
    from transformers import AutoModelForCausalLM

    batch = samples()
    reference = reference_logprobs(
        AutoModelForCausalLM.from_pretrained(family_dirs["gemma2"]), batch, 1.0
    )
    with caplog.at_level(logging.INFO, logger="trainer"):
        auto = load(family_dirs["gemma2"], cpu_world, 7)
    assert (
        "attention: eager (attn_implementation = auto; the model uses attention-logit "
        "softcapping at 10, a sliding window of 8 tokens)"
    ) in caplog.text
    assert auto.config._attn_implementation == "eager"
    assert (trainer_logprobs(auto, cpu_world, batch, 1.0) - reference).abs().max() < TOLERANCE
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="trainer"):
        sdpa = load(family_dirs["gemma2"], cpu_world, 7, attn_implementation="sdpa")
    assert "sdpa lacks attention-logit softcapping at 10" in caplog.text
    (cause,) = parity_causes(sdpa, None)
    assert "kernel sdpa lacks attention-logit softcapping at 10" in cause
    assert "attn_implementation = auto (or eager)" in cause
    assert parity_causes(auto, None) == []
    assert (trainer_logprobs(sdpa, cpu_world, batch, 1.0) - reference).abs().max() > 0.1


def test_gemma2_packed_rows_with_the_kernels_that_softcap(family_dirs, cpu_world, kernel="eager"):
    """Kernels that honour the softcap and the sliding window give the HF forward's logprobs on
    packed rows (flex_attention, which compiles its kernel: tests/integration/
    test_compiled_kernels.py)."""
    from transformers import AutoModelForCausalLM

    batch = samples(1)
    reference = reference_logprobs(
        AutoModelForCausalLM.from_pretrained(family_dirs["gemma2"]), batch, 1.0
    )
    model = load(family_dirs["gemma2"], cpu_world, 7, attn_implementation=kernel)
    assert (trainer_logprobs(model, cpu_world, batch, 1.0) - reference).abs().max() < TOLERANCE


def test_an_unlisted_architecture_keeps_its_own_head_and_says_so(
    family_dirs, cpu_world, caplog, monkeypatch
):
    from transformers import AutoModelForCausalLM

    monkeypatch.delitem(HEAD_TRANSFORMS, "GraniteForCausalLM")
    batch = samples()
    reference = reference_logprobs(
        AutoModelForCausalLM.from_pretrained(family_dirs["granite"]), batch, 1.0
    )
    with caplog.at_level(logging.INFO, logger="trainer"):
        model = load(family_dirs["granite"], cpu_world, 7)
    assert not model.chunked_head
    assert "logprob head: the model's own, unchunked: GraniteForCausalLM is not among" in (
        caplog.text
    )
    assert (trainer_logprobs(model, cpu_world, batch, 1.0) - reference).abs().max() < TOLERANCE


def lora_head_gradients(model, world, batch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    mb = packed_row(batch)
    logprobs, _ = forward_logprobs(model, world, mb, 1.0)
    logprobs[mb.loss_mask].sum().backward()
    head = model.get_output_embeddings()
    return logprobs[mb.loss_mask].detach(), {
        "A": head.lora_A.weight.grad,
        "B": head.lora_B.weight.grad,
        "bias": head.bias.grad,
    }


def test_a_lora_adapter_on_lm_head_trains_through_the_chunked_head(family_dirs, cpu_world):
    """Phi (head bias) with adapters on lm_head: chunked logprobs and the adapter's (and the
    bias's) gradients equal those of full logits; with dropout the head is not chunked."""
    lora = LoraConfig(rank=4, target_modules=["lm_head", "q_proj"])
    results = []
    for chunk in (5, None):
        torch.manual_seed(0)
        model = load(family_dirs["phi"], cpu_world, chunk, lora=lora)
        head = model.get_output_embeddings()
        with torch.no_grad():  # B starts at 0: make the adapter do something
            head.lora_B.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
        head.bias.requires_grad_(True)
        results.append(lora_head_gradients(model, cpu_world, samples()))
    (chunked, chunked_grads), (full, full_grads) = results
    torch.testing.assert_close(chunked, full, atol=TOLERANCE, rtol=0)
    for name, grad in full_grads.items():
        assert grad.abs().sum() > 0, name
        torch.testing.assert_close(chunked_grads[name], grad, atol=1e-4, rtol=1e-3)
    dropout = LoraConfig(rank=4, target_modules=["lm_head"], dropout=0.1)
    assert not load(family_dirs["phi"], cpu_world, 5, lora=dropout).chunked_head
