"""The trainer's peak memory, estimated from a model's shape (config.json and safetensors
headers: no torch import, no weights read). The launcher's pre-flight check
(launcher/memory.py) and the trainer's `auto` activation checkpointing (trainer/speed_policy.py)
read the same estimate.

Terms, for P parameters and T tokens per forward pass (`data.micro_batch_tokens`):
fp32 master weights 4P, gradients 4P, AdamW moments 8P, a compute-dtype copy of the weights
(autocast's cast cache) 2P in bf16, activations T x layers x hidden x the compute dtype's bytes
per hidden unit (`activation_bytes`; one layer's worth plus a hidden state per layer with
activation checkpointing), and the loss head LOSS_HEAD_COPIES x T x vocab x 4. The constants
were fitted to peaks measured on CPU with the default model, full and LoRA, in bf16 and fp32
(benchmarks/trainer_throughput.py prints estimate and measurement side by side); FSDP2 divides
the first four terms by the number of trainer GPUs."""

from pathlib import Path

from rlcore.forecast.shape import ModelShape, folder_shape, safetensors_params  # noqa: F401

ACTIVATION_BYTES_PER_HIDDEN = 85
"""Saved activations per token, layer and hidden unit, in bytes (bf16 compute)."""
FP32_ACTIVATION_BYTES_PER_HIDDEN = 125
"""The same with fp32 compute (autocast keeps norms and the residual stream in fp32 either
way, so not twice bf16's; measured 1.5x on CPU with the default model)."""
LORA_ACTIVATION_BYTES_PER_HIDDEN = 112
"""The same with bf16 compute and a frozen base under LoRA adapters: a third more, as in fp32
(LORA_FP32_...). Fitted to the peaks of `rl @ configs/lora/rl.toml` on CPU, not modelled
tensor by tensor: the tensors autograd saves there are fewer than 85 bytes' worth (0.41 GiB
for 512 tokens of the default model, the frozen weights' copies aside), yet with 85 the peak
came at 1.09-1.16x the estimate in 9 runs on a Zen 5 EPYC, against 1.00 in fp32 with 165.
Across micro-batches of 256, 512 and 1,024 tokens the excess shrank as the batch grew (0.45,
0.35, 0 GiB), so this is right at the CPU default of 512 tokens and above the peak beyond it."""
LORA_FP32_ACTIVATION_BYTES_PER_HIDDEN = 165
"""The same with fp32 compute and a frozen base under LoRA adapters (measured 2.4x bf16's on
CPU, against 1.5x without adapters; not modelled tensor by tensor)."""
LOSS_HEAD_COPIES = 4
"""fp32 logits-sized tensors alive at once in the loss head (logits, log-softmax, grads)."""
PROCESS_OVERHEAD = 0.3 * 2**30
"""torch, transformers and the Python process itself."""
GIB = 2**30


def model_shape(folder: Path) -> ModelShape | None:
    """The shape of the HF model in `folder`; None when its files do not say
    (rlcore.forecast.shape reads it, as the run's estimate does)."""
    return folder_shape(folder)


def trainer_peak(
    shape: ModelShape,
    tokens: int,
    compute_bytes: int,
    checkpointing: bool,
    shards: int = 1,
    trainable: int | None = None,
    head_chunk: int | None = None,
    checkpoint_freq: int = 1,
    on_gpu: bool = False,
) -> dict[str, float]:
    """The estimate's terms in bytes (see the module docstring); `trainable`: the parameters
    that train when fewer than all do (LoRA adapters), for gradients and optimizer state;
    `head_chunk`: the chunked logprob head's chunk (`model.logprob_chunk_tokens`), which bounds
    the loss head's logits to that many tokens; `checkpoint_freq`: with checkpointing, only
    every n-th layer recomputes, the others keep their activations; `on_gpu`: the trainer's
    GPUs hold the activations (`activation_bytes`)."""
    p = shape.params
    t = shape.params if trainable is None else trainable
    per_hidden = activation_bytes(compute_bytes, trainable is not None, on_gpu)
    layer_bytes = tokens * shape.hidden * per_hidden
    if checkpointing:
        recomputed = -(-shape.layers // checkpoint_freq)
        kept = (shape.layers - recomputed) * layer_bytes
        activations = tokens * shape.hidden * compute_bytes * recomputed + layer_bytes + kept
    else:
        activations = layer_bytes * shape.layers
    return {
        "weights": 4 * p / shards,
        "gradients": 4 * t / shards,
        "optimizer": 8 * t / shards,
        "compute copy": (compute_bytes * p if compute_bytes < 4 else 0) / shards,
        "activations": activations,
        "loss head": LOSS_HEAD_COPIES * min(tokens, head_chunk or tokens) * shape.vocab * 4,
        "process": PROCESS_OVERHEAD,
    }


def activation_bytes(compute_bytes: int, adapters: bool, on_gpu: bool = False) -> int:
    """Saved activations per token, layer and hidden unit for the compute dtype's bytes, with
    or without LoRA adapters on a frozen base. bf16's third more under adapters was measured
    with a CPU's autocast only: on GPUs (FSDP2's mixed precision, no autocast) adapters take
    bf16's figure, as the full model's estimate there already lies above its peak (one H200:
    52.1 GiB estimated, 32.6-44.0 measured)."""
    if compute_bytes < 4:
        lora_cpu = adapters and not on_gpu
        return LORA_ACTIVATION_BYTES_PER_HIDDEN if lora_cpu else ACTIVATION_BYTES_PER_HIDDEN
    return LORA_FP32_ACTIVATION_BYTES_PER_HIDDEN if adapters else FP32_ACTIVATION_BYTES_PER_HIDDEN


def describe(parts: dict[str, float]) -> str:
    total = sum(parts.values())
    terms = ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts.items() if value)
    return f"about {total / GIB:.1f} GiB ({terms})"


def available_ram() -> int | None:
    """This machine's available memory in bytes (rlcore.processes.procs); None where it cannot
    be read."""
    from rlcore.processes import procs

    return procs.available_memory()
