"""The pre-flight memory check: the trainer's estimated peak (rlcore/forecast/memory.py) against
what it can have, the smallest trainer GPU or, on CPU, the machine's available memory less what
inference takes."""

from rlcore.forecast.memory import (  # noqa: F401  (re-exported: the launcher's and tests' names)
    ACTIVATION_BYTES_PER_HIDDEN,
    GIB,
    LOSS_HEAD_COPIES,
    PROCESS_OVERHEAD,
    ModelShape,
    available_ram,
    describe,
    model_shape,
    safetensors_params,
    trainer_peak,
)
from rlcore.host.machine import DTYPE_BYTES
from rlcore.processes import children


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


def estimate_parts(
    config, gpu_map: dict[str, list[int]], shape: ModelShape, checkpointing: bool, freq: int
) -> dict[str, float]:
    """The trainer's peak memory by term for `config` on this GPU map, with activation
    checkpointing as given (`auto` decides it from this estimate: trainer/speed_policy.py)."""
    trainer = config.trainer
    gpus = gpu_map.get("trainer") or []
    lora = trainer.lora
    # Adapters: about two rank x hidden matrices per target layer per block.
    adapters = None if lora is None else 2 * lora.rank * shape.hidden * len(lora.target_modules)
    trainable = None if adapters is None else adapters * shape.layers
    parts = trainer_peak(
        shape,
        trainer.tokens_per_pass(on_cpu=not gpus),
        DTYPE_BYTES.get(trainer.model.dtype, 2),
        checkpointing,
        max(len(gpus), 1),
        trainable=trainable,
        head_chunk=trainer.model.logprob_chunk_tokens,
        checkpoint_freq=freq,
        on_gpu=bool(gpus),
    )
    if gpus:
        parts.pop("process")  # host memory, not the GPU's
    else:
        parts["background copies"] = background_copies(
            shape,
            trainable,
            trainer.ckpt.background,
            trainer.weight_transfer.copies_in_background(),
        )
    return parts


def trainer_memory(config, gpu_map: dict[str, list[int]], shape: ModelShape) -> tuple:
    """(bytes the trainer can have or None when unknown, where that is): the smallest trainer
    GPU, or on CPU the machine's available memory less what inference takes (weights + KV
    cache + overhead)."""
    gpus = gpu_map.get("trainer") or []
    if gpus:
        return gpu_memory(gpus), f"GPU {gpus[0]}"
    ram = available_ram()
    inference = 0.0
    if not gpu_map.get("inference"):
        serving = DTYPE_BYTES.get(config.inference.model.dtype, 2)  # `auto` counted as 2
        inference = shape.params * serving + config.inference.cpu.kvcache_space_gib * GIB
        inference += INFERENCE_OVERHEAD
        inference *= config.inference.replicas
    have = ram - inference if ram is not None else None
    return have, "this machine's available memory less inference's share"


def run_shape(config) -> ModelShape | None:
    """The shape of the trainer's model, from its local folder (or the bundled model's GGUF
    header before its first conversion); None without one."""
    from rlcore.forecast.shape import shape_of

    shape, _ = shape_of(config.trainer.model.name)
    return shape


def check_memory(config, gpu_map: dict[str, list[int]]) -> tuple[str, str | None]:
    """A line for the plan ("trainer peak memory: ...") and a warning when the estimate
    exceeds what the trainer can have (`trainer_memory`)."""
    shape = run_shape(config)
    if shape is None:
        return "trainer peak memory: not estimated (no local model folder or shape)", None
    trainer = config.trainer
    tokens = trainer.tokens_per_pass(on_cpu=not gpu_map.get("trainer"))
    parts = estimate_parts(
        config,
        gpu_map,
        shape,
        trainer.model.activation_checkpointing is True,
        trainer.model.activation_checkpointing_freq,
    )
    have, where = trainer_memory(config, gpu_map, shape)
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
