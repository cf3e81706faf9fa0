"""What can make the trainer's logprobs differ from the inference engine's, as far as the trainer
can tell from the model it loaded and the model folder: read once at setup, named (with the knob
that fixes each) when the first step's parity check fails."""

import json
from pathlib import Path

import torch

from trainer.attention import missing_features
from trainer.model_type import TrainerModel

# generation_config.json keys vLLM takes as sampling defaults, and their neutral values
NEUTRAL_SAMPLING = {"top_k": (0, -1, None), "top_p": (1.0, None), "min_p": (0.0, None)}
NEUTRAL_SAMPLING |= {"repetition_penalty": (1.0, None), "presence_penalty": (0.0, None)}
NEUTRAL_SAMPLING |= {"frequency_penalty": (0.0, None)}
DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def parity_causes(model: TrainerModel, folder: Path | None) -> list[str]:
    """Known causes of a trainer/inference logprob mismatch for this model, each with its fix;
    empty when the trainer sees none."""
    causes = []
    kernel = model.config._attn_implementation
    missing = missing_features(kernel, model.config)
    if missing:
        causes.append(
            f"the trainer's attention kernel {kernel} lacks {', '.join(missing)}, which "
            f"{type(model).__name__} uses: set trainer.model.attn_implementation = auto (or eager)"
        )
    compute, serving = DTYPE_NAMES[model.compute_dtype], DTYPE_NAMES[model.serving_dtype]
    if compute != serving:
        causes.append(
            f"dtype: the trainer computes in {compute} while inference serves {serving} "
            f"(trainer.model.dtype vs inference.model.dtype): set trainer.model.dtype = {serving}, "
            "or raise trainer.parity.max_mismatch_kl for a known precision gap"
        )
    lora = getattr(model, "lora_config", None)
    if lora is not None and lora.dropout:
        causes.append(
            f"lora.dropout = {lora.dropout}: the trainer drops adapter inputs the engine keeps: "
            "set trainer.lora.dropout = 0"
        )
    defaults = sampling_defaults(folder)
    if defaults:
        causes.append(
            f"sampling defaults: the model folder's generation_config.json sets {defaults}, "
            "which vLLM applies to every request unless it runs with --generation-config vllm "
            "(the `inference` command does; a server started by hand may not): start it so, or "
            "remove those keys"
        )
    return causes


def sampling_defaults(folder: Path | None) -> dict:
    """Non-neutral sampling settings in `folder/generation_config.json` (vLLM's defaults)."""
    path = folder / "generation_config.json" if folder is not None else None
    if path is None or not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {
        k: v for k, v in config.items() if k in NEUTRAL_SAMPLING and v not in NEUTRAL_SAMPLING[k]
    }


def parity_message(step: int, kl: float, limit: float, causes: list[str]) -> str:
    """The failed check's message: the causes the trainer found, else the usual suspects."""
    head = (
        f"parity check failed at step {step}: mismatch_kl {kl:.3g} > {limit:g} "
        "(parity.max_mismatch_kl): the trainer's logprobs of the sampled tokens disagree with "
        "the inference engine's. "
    )
    if causes:
        found = "; ".join(f"({i}) {cause}" for i, cause in enumerate(causes, 1))
        return head + f"Causes found: {found}. --trainer.parity.enabled false skips this check"
    return head + (
        "The trainer found no known cause (head transform, attention kernel, dtype, sampling "
        "defaults all agree); check that the served model folder is the trainer's (same "
        "weights, tokenizer and chat template), and whether the server took sampling defaults "
        "from the model folder's generation_config.json (start vLLM with --generation-config "
        "vllm). --trainer.parity.enabled false skips this check"
    )
