"""The trainer's half of `deterministic = true`: the same batches give bit-identical updates.

What it fixes: torch's deterministic algorithms (an op without one raises and names itself),
cuBLAS's workspace (set before CUDA starts) and cuDNN's autotuning off. The intra-op thread
count is logged, not chosen: CPU kernels split reductions by thread, so runs compare bit for
bit only with the same count (torch's default, the machine's cores, or OMP_NUM_THREADS).
Data order needs nothing: a batch is consumed in the order the orchestrator wrote it, and
`split_for_ranks` is a pure function of it; gradients are reduced by FSDP2's reduce-scatter /
gloo in a fixed rank order for a fixed world size.
"""

import logging
import os

logger = logging.getLogger("trainer")
CUBLAS_WORKSPACE = ("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
"""cuBLAS is deterministic only with a fixed workspace (set before the first CUDA call)."""


def prepare_environment(deterministic: bool) -> None:
    """Before torch touches CUDA: what must be in the environment."""
    if deterministic:
        os.environ.setdefault(*CUBLAS_WORKSPACE)


def setup_determinism(seed: int, deterministic: bool) -> None:
    import torch

    torch.manual_seed(seed)
    if not deterministic:
        return
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    threads = torch.get_num_threads()
    logger.info(
        f"deterministic: torch deterministic algorithms on, {threads} intra-op threads (runs "
        "compare bit for bit only with the same thread count, machine and versions)"
    )
