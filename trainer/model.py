"""Load the policy as an HF causal LM with fp32 master weights; compute runs in the configured
dtype (FSDP2's mixed-precision policy on GPUs, autocast on CPU); shard it with FSDP2 when
distributed.

AdamW on bf16 parameters rounds away every update smaller than half a bf16 ulp (most of them at
RL learning rates), so the parameters and optimizer state the trainer updates are always fp32.
"""

import contextlib
import logging
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from rlcore.host.machine import compute_dtype as choose_dtype
from rlcore.host.machine import probe, slow_bf16_warning
from trainer.config import LoraConfig, TrainerModelConfig
from trainer.dist import World
from trainer.model_type import TrainerModel
from trainer.speed import TrainerRun, use_compile_cache
from trainer.speed import choose as choose_speed

T = TypeVar("T", bound=torch.Tensor)
logger = logging.getLogger("trainer")
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def compute_dtype(config: TrainerModelConfig, device: torch.device) -> torch.dtype:
    """The dtype of the forward and backward pass (and of published weights): `model.dtype`;
    `auto` picks it for this machine (rlcore.host.machine: bf16 on a GPU or a CPU with native bf16,
    fp32 elsewhere). An explicit bf16 on a CPU without native bf16 is kept, with a warning."""
    machine = probe()
    name, why = choose_dtype(config.dtype, device.type == "cuda", machine)
    if device.type == "cpu" and (warning := slow_bf16_warning("model.dtype", name, machine)):
        logger.warning(warning)
    logger.info("compute dtype %s (%s; %s)", name, why, machine.describe())
    return DTYPES[name]


def load_model(
    config: TrainerModelConfig,
    source: str,
    world: World,
    lora: LoraConfig | None = None,
    run: TrainerRun | None = None,
    fused: bool | str = "auto",
    masked_rows: bool = True,
) -> TrainerModel:
    """The model in train mode on `world.device`, fp32 parameters, sharded per decoder layer
    when distributed; `model.compute_dtype` says what the forward pass runs in and
    `model.serving_dtype` what published weights are written in. With `lora`, only adapters
    on the target layers train (trainer/lora.py). `model.speed` holds the speed choices
    (trainer/speed.py) for a training `run` (None: no run, so `auto` compiles nothing) and the
    optimizer's `fused` setting. `masked_rows`: the rows may carry an explicit attention mask
    (shared prompts), which only sdpa reads (trainer/attention.py `choose_attention`)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainer.attention import choose_attention

    model_config = AutoConfig.from_pretrained(source, trust_remote_code=config.trust_remote_code)
    dtype = compute_dtype(config, world.device)
    may_compile = config.compile is True or (config.compile == "auto" and run is not None)
    masked_rows = masked_rows or may_compile  # a compiled model keeps sdpa
    attention = choose_attention(
        config.attn_implementation, world.device, dtype, model_config, masked_rows
    )
    hf_model = AutoModelForCausalLM.from_pretrained(
        source,
        dtype=torch.float32,
        attn_implementation=attention,
        trust_remote_code=config.trust_remote_code,
    )
    model = typing.cast(TrainerModel, hf_model)  # given its attributes below
    model.compute_dtype = dtype
    serving = config.serving_dtype
    model.serving_dtype = DTYPES[serving] if serving else model.compute_dtype
    model.config.use_cache = False
    if lora is not None:
        from trainer.lora import apply_lora

        apply_lora(model, lora)
    model.chunked_head = False
    if config.logprob_chunk_tokens is not None:
        from trainer.logprob_head import install

        model.chunked_head = install(model, config.logprob_chunk_tokens, model.compute_dtype)
    model.speed = choose_speed(config, model, world.device, probe(), run, fused)
    logger.info(f"speed: {model.speed.describe()}")
    if model.speed.checkpointing:
        checkpoint_layers(model, model.speed.checkpointing_freq)
    if model.speed.compile:
        logger.info(f"compile cache: {use_compile_cache()}")
        for layer in decoder_layers(model):
            layer.compile()
    if world.distributed:
        shard_model(model, world, model.compute_dtype)
    else:
        model.to(world.device)
    model.train()
    return model


def decoder_layers(model: TrainerModel) -> list[nn.Module]:
    """The model's repeated blocks (the classes it names in `_no_split_modules`), in order."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    return [m for m in model.modules() if type(m).__name__ in names]


def checkpoint_layers(model: TrainerModel, freq: int) -> None:
    """Activation checkpointing on every `freq`-th decoder layer (the first, then every freq-th
    after it); the others keep their activations."""
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for i, layer in enumerate(decoder_layers(model)):
        # torch types a module's attributes as tensors or modules; HF's layers read this flag
        layer.gradient_checkpointing = i % freq == 0  # type: ignore[assignment]


def shard_model(model: TrainerModel, world: World, dtype: torch.dtype) -> None:
    """FSDP2: one shard group per decoder layer (the model's `_no_split_modules`), then the
    root (embeddings, final norm, head). Parameters stay fp32 (the master copy); FSDP casts
    them to `dtype` for compute and reduces gradients in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
    model.to(world.device)
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=policy)
    fully_shard(model, mp_policy=policy)


def compute_context(model: TrainerModel, world: World) -> contextlib.AbstractContextManager:
    """Where the forward pass runs in the compute dtype: FSDP2 casts by itself; a single CPU
    process autocasts (fp32 compute needs nothing), without autocast's cache of weight casts,
    which would keep every weight's copy alive to the end of the forward (the head's peak)."""
    dtype = model.compute_dtype
    if world.distributed or dtype == torch.float32:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(torch.autograd.graph.saved_tensors_hooks(*recast_weights(dtype)))
    stack.enter_context(
        torch.autocast(device_type=world.device.type, dtype=dtype, cache_enabled=False)
    )
    return stack


def recast_weights(dtype: torch.dtype):
    """Saved-tensor hooks for an autocast forward: autograd keeps, for the backward pass, the
    compute-dtype copy autocast made of every weight (0.2 GiB for SmolLM2-135M in bf16, at
    every micro-batch's peak); keep a reference to the parameter instead and cast it again when
    backward needs it: the same values, for one more cast per weight and micro-batch."""

    def pack(saved: torch.Tensor):
        node, transposed = saved.grad_fn, False
        if node is not None and node.name() == "TBackward0":  # a linear saves weight.t()
            node, transposed = node.next_functions[0][0], True
        if saved.dtype != dtype or node is None or node.name() != "ToCopyBackward0":
            return saved
        param = getattr(node.next_functions[0][0], "variable", None)  # AccumulateGrad: a leaf
        shape = saved.shape[::-1] if transposed else saved.shape
        if param is None or param.shape != shape or not param.is_contiguous():
            return saved
        return RecastWeight(param, transposed)

    def unpack(packed):
        if not isinstance(packed, RecastWeight):
            return packed
        weight = packed.param.detach().to(dtype)
        return weight.t() if packed.transposed else weight

    return pack, unpack


@dataclass(frozen=True)
class RecastWeight:
    """What `recast_weights` keeps in place of a weight's compute-dtype copy."""

    param: torch.Tensor
    transposed: bool


def source_dir(source: str) -> Path | None:
    """The local folder the model came from (tokenizer and config files live there), if any."""
    path = Path(source)
    if path.is_dir():
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(source, local_files_only=True))
    except Exception:  # not in the local HF cache: published folders get the tokenizer instead
        return None


def drop_tied_copies(model: TrainerModel, state: dict[str, T]) -> dict[str, T]:
    """Gathered or cast copies of tied parameters no longer share storage, so both would be
    saved: keep only the source (loaders tie them again)."""
    for target, source in (getattr(model, "all_tied_weights_keys", None) or {}).items():
        if target in state and source in state:
            del state[target]
    return state


def cast(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """Floating-point tensors in `dtype` (the fp32 master weights are published in the serving
    dtype); integer buffers unchanged."""
    if dtype is None or not tensor.is_floating_point() or tensor.dtype == dtype:
        return tensor
    return tensor.to(dtype)
