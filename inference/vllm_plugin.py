"""The `vllm.general_plugins` entry point (pyproject.toml): vLLM calls `register` in every
process it starts (API server, engine core, workers), so the `gloo` weight-transfer engine is
known wherever `--weight-transfer-config '{"backend": "gloo"}'` makes a worker create it.
Registration is by module path: nothing heavy is imported until a worker creates the engine.
A deterministic run also gets its batch-invariant CPU linear layers here
(inference/batch_invariant.py), and every process the CPU packing of inference/cpu_matmul.py
(bf16 linear layers with `cpu.matmul_dtype = bfloat16`)."""

GLOO_ENGINE = "gloo"


def register() -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    from inference import batch_invariant, cpu_matmul

    if batch_invariant.enabled():  # a deterministic run on CPU (inference/batch_invariant.py)
        batch_invariant.install()
    cpu_matmul.install()  # CPU packing: bf16 where enabled, embeddings on first use

    try:
        WeightTransferEngineFactory.register_engine(
            GLOO_ENGINE, "inference.gloo_engine", "GlooWeightTransferEngine"
        )
    except ValueError:  # registered already: plugins may be loaded more than once
        pass
