"""The `vllm.general_plugins` entry point (pyproject.toml): vLLM calls `register` in every
process it starts (API server, engine core, workers), so the `gloo` weight-transfer engine is
known wherever `--weight-transfer-config '{"backend": "gloo"}'` makes a worker create it.
Registration is by module path: nothing heavy is imported until a worker creates the engine.
A deterministic run also gets its batch-invariant CPU linear layers here
(inference/batch_invariant.py), and every process on CPU the packing of inference/cpu_matmul.py
(bf16 linear layers with `cpu.matmul_dtype = bfloat16`; a GPU never calls the CPU dispatch it
wraps, nor checks the vLLM version it was written for)."""

GLOO_ENGINE = "gloo"


def register() -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    from vllm.platforms import current_platform

    from inference import batch_invariant, cpu_matmul

    if batch_invariant.enabled():  # a deterministic run on CPU (inference/batch_invariant.py)
        batch_invariant.install()
    if current_platform.is_cpu():  # CPU packing: bf16 where enabled, embeddings on first use
        cpu_matmul.install()

    try:
        WeightTransferEngineFactory.register_engine(
            GLOO_ENGINE, "inference.gloo_engine", "GlooWeightTransferEngine"
        )
    except ValueError:  # registered already: plugins may be loaded more than once
        pass
