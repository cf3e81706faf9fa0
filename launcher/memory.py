"""The trainer's peak memory, estimated before anything starts, from the model folder's
config.json and safetensors headers (no torch import, no weights read).

Terms, for P parameters and T tokens per forward pass (`data.micro_batch_tokens`):
fp32 master weights 4P, gradients 4P, AdamW moments 8P, a compute-dtype copy of the weights
(autocast's cast cache) 2P in bf16, activations T x layers x ACTIVATION_BYTES_PER_HIDDEN x
hidden (one layer's worth plus a hidden state per layer with activation checkpointing), and
the loss head LOSS_HEAD_COPIES x T x vocab x 4. The constants were fitted to peaks measured on
CPU with the default model (benchmarks/trainer_throughput.py prints estimate and measurement
side by side); FSDP2 divides the first four terms by the number of trainer GPUs."""

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from rlcore import children, procs

ACTIVATION_BYTES_PER_HIDDEN = 85
"""Saved activations per token, layer and hidden unit, in bytes (bf16 compute)."""
LOSS_HEAD_COPIES = 4
"""fp32 logits-sized tensors alive at once in the loss head (logits, log-softmax, grads)."""
PROCESS_OVERHEAD = 0.3 * 2**30
"""torch, transformers and the Python process itself."""
GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    params: int
    hidden: int
    layers: int
    vocab: int


def safetensors_params(folder: Path) -> int:
    """Elements over all *.safetensors files in `folder`, read from their JSON headers."""
    total = 0
    for file in folder.glob("*.safetensors"):
        with file.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                count = 1
                for dim in entry["shape"]:
                    count *= dim
                total += count
    return total


def model_shape(folder: Path) -> ModelShape | None:
    """The shape of the HF model in `folder`; None when its files do not say."""
    try:
        config = json.loads((folder / "config.json").read_text())
        config = config.get("text_config", config)
        params = safetensors_params(folder)
        return ModelShape(
            params, config["hidden_size"], config["num_hidden_layers"], config["vocab_size"]
        )
    except (OSError, ValueError, KeyError, struct.error):
        return None


def trainer_peak(
    shape: ModelShape, tokens: int, compute_bytes: int, checkpointing: bool, shards: int = 1,
    trainable: int | None = None, head_chunk: int | None = None, checkpoint_freq: int = 1,
) -> dict[str, float]:  # fmt: skip
    """The estimate's terms in bytes (see the module docstring); `trainable`: the parameters
    that train when fewer than all do (LoRA adapters), for gradients and optimizer state;
    `head_chunk`: the chunked logprob head's chunk (`model.logprob_chunk_tokens`), which bounds
    the loss head's logits to that many tokens; `checkpoint_freq`: with checkpointing, only
    every n-th layer recomputes, the others keep their activations."""
    p = shape.params
    t = shape.params if trainable is None else trainable
    layer_bytes = tokens * shape.hidden * ACTIVATION_BYTES_PER_HIDDEN
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


def background_copies(
    shape: ModelShape, trainable: int | None, ckpt_background: bool, publish_background: bool
) -> float:
    """Host memory the background writes hold while they run: a checkpoint's staged copy
    (fp32 weights and AdamW moments of what trains) and the published policy (at most fp32);
    on CPU it comes on top of the training peak."""
    t = shape.params if trainable is None else trainable
    staged = 4 * t + 8 * t if ckpt_background else 0
    published = 4 * t if publish_background else 0
    return float(staged + published)


def describe(parts: dict[str, float]) -> str:
    total = sum(parts.values())
    terms = ", ".join(f"{name} {value / GIB:.1f}" for name, value in parts.items() if value)
    return f"about {total / GIB:.1f} GiB ({terms})"


def available_ram() -> int | None:
    """This machine's available memory in bytes (rlcore.procs); None where it cannot be read."""
    return procs.available_memory()


def gpu_memory(gpu_ids: list[int]) -> int | None:
    """The smallest total memory of `gpu_ids`, asked of nvidia-smi; None without one."""
    import shutil
    import subprocess

    if not gpu_ids or shutil.which("nvidia-smi") is None:
        return None
    query = ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"]
    try:
        out = children.run(query, capture_output=True, text=True, timeout=20, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = {}
    for line in out.stdout.splitlines():
        index, mib = (part.strip() for part in line.split(","))
        sizes[int(index)] = int(mib) * 2**20
    wanted = [sizes[i] for i in gpu_ids if i in sizes]
    return min(wanted) if wanted else None


INFERENCE_OVERHEAD = 2.0 * 2**30
"""vLLM's own processes on CPU, besides the weights and the KV cache."""


def check_memory(config, gpu_map: dict[str, list[int]]) -> tuple[str, str | None]:
    """A line for the plan ("trainer peak memory: ...") and a warning when the estimate
    exceeds what the trainer can have: the smallest trainer GPU, or on CPU the machine's
    available memory less what inference takes (weights + KV cache + overhead)."""
    from rlcore.models import model_folder

    folder = model_folder(config.trainer.model.name)
    shape = model_shape(folder) if folder is not None else None
    if shape is None:
        return "trainer peak memory: not estimated (no local model folder)", None
    trainer = config.trainer
    gpus = gpu_map.get("trainer") or []
    tokens = trainer.tokens_per_pass(on_cpu=not gpus)
    compute_bytes = 4 if trainer.model.dtype == "float32" else 2
    lora = trainer.lora
    # Adapters: about two rank x hidden matrices per target layer per block.
    adapters = None if lora is None else 2 * lora.rank * shape.hidden * len(lora.target_modules)
    trainable = None if adapters is None else adapters * shape.layers
    parts = trainer_peak(
        shape, tokens, compute_bytes, trainer.model.activation_checkpointing, max(len(gpus), 1),
        trainable=trainable,
        head_chunk=trainer.model.logprob_chunk_tokens,
        checkpoint_freq=trainer.model.activation_checkpointing_freq,
    )  # fmt: skip
    if gpus:
        have, where = gpu_memory(gpus), f"GPU {gpus[0]}"
        parts.pop("process")  # host memory, not the GPU's
    else:
        parts["background copies"] = background_copies(
            shape, trainable, trainer.ckpt.background,
            trainer.weight_transfer.copies_in_background(),
        )  # fmt: skip
        ram = available_ram()
        inference = 0.0
        if not gpu_map.get("inference"):
            serving = 4 if config.inference.model.dtype == "float32" else 2
            inference = shape.params * serving + config.inference.cpu.kvcache_space_gib * GIB
            inference += INFERENCE_OVERHEAD
            inference *= config.inference.replicas
        have = ram - inference if ram is not None else None
        where = "this machine's available memory less inference's share"
    need = sum(parts.values())
    line = f"trainer peak memory: {describe(parts)}"
    if have is None:
        return line, None
    line += f" of {have / GIB:.1f} GiB ({where})"
    if need <= have:
        return line, None
    return line, (
        f"the trainer may need {describe(parts)} at its peak but has about {have / GIB:.1f} "
        f"GiB ({where}) and may be killed for running out of memory: lower "
        f"--trainer.data.micro-batch-tokens (now {tokens}), turn on "
        "--trainer.model.activation-checkpointing, or lower --seq-len"
    )
