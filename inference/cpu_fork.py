"""Start vLLM's CPU engine core and worker by fork instead of spawn (`cpu.start_method`).

vLLM's CPU platform forces spawn, so each of its two child processes imports torch and vLLM
again (about 10 s each on two cores) and keeps a private copy of every imported module. Forked,
they start in a second and share those pages with this process: the quick start's server is
ready in 16 s instead of 37 s and takes 0.8 GiB less memory (2.70 against 3.52 GiB).

Spawn gave one thing for free: the worker's OpenMP read GOMP_CPU_AFFINITY (set by vLLM for
each worker) when it loaded, and pinned its threads one per core. A forked worker inherits an
OpenMP that loaded long before that variable was set, so the worker pins its threads itself,
the same way (unpinned, generation was 35% slower).

With one worker (no tensor, pipeline or data parallelism) it also runs inside the engine
core's process (vLLM's `uni` executor; `cpu.separate_worker = true` keeps vLLM's own layout):
nothing then passes each step's inputs and outputs between two processes, nor waits for them
by polling, which on two cores took CPU time from generation and from a trainer beside it.
"""

import gc
import inspect
import logging
import os
import signal

from inference.patches import VLLM_SUPPORTED, replace, require_version
from rlcore.processes.children import die_with_parent, libc_prctl

logger = logging.getLogger("inference")
FORK_ENV = "VLLM_WORKER_MULTIPROC_METHOD"
ACTIVE = False  # set once start_by_fork has patched vLLM


def start_by_fork(separate_worker: bool = False) -> bool:
    """Make vLLM fork its CPU processes, with one worker inside the engine core's process
    unless `separate_worker`; False (spawn stays) when this vLLM lacks the hooks. A ConfigError
    on a vLLM it was not written for."""
    require_version("vllm", VLLM_SUPPORTED, "cpu.start_method = 'fork' (inference/cpu_fork.py)")
    try:
        from vllm.platforms.cpu import CpuPlatform
        from vllm.v1.worker.cpu_worker import CPUWorker
    except ImportError as err:
        logger.warning(f"cpu.start_method = 'fork' unavailable in this vLLM ({err}): spawning")
        return False
    # the classmethod's function: called with the class vLLM calls the patch with
    check_config = inspect.getattr_static(CpuPlatform, "check_and_update_config").__func__
    init_device = CPUWorker.init_device

    def check_and_fork(cls, vllm_config) -> None:
        check_config(cls, vllm_config)
        os.environ[FORK_ENV] = "fork"  # the platform has just set spawn
        if not separate_worker:
            worker_in_engine_core(vllm_config.parallel_config)
        gc.freeze()  # children share the imported modules' pages until a collection writes them

    def pin_then_init(self) -> None:
        pin_openmp_threads(engine_core_cpus(self.vllm_config))
        init_device(self)

    replace(CpuPlatform, "check_and_update_config", classmethod(check_and_fork))
    replace(CPUWorker, "init_device", pin_then_init)
    global ACTIVE
    ACTIVE = True
    return True


def child_forgets(sock, stopping) -> None:
    """In every process forked from here on (engine core, worker, theirs): exit at once if
    `stopping` (an Event) was set before the fork, since the stop has listed this process's
    children already; close the server's listening socket, which would keep the port bound
    by an orphan after this process dies (a spawned child never had it); restore the default
    SIGTERM/SIGINT handlers, so that this process's startup handlers never run in a child
    that has not set its own yet."""

    def in_child() -> None:
        if stopping.is_set():
            os._exit(0)
        fd = sock.detach()  # -1 in a grandchild: its parent detached it already
        if fd >= 0:
            os.close(fd)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        # SIGKILL when the thread that forked it ends: a killed server leaves no engine core
        # or worker behind (rlcore.processes.children).
        die_with_parent(signal.SIGKILL)

    libc_prctl()  # resolved here, before any fork
    os.register_at_fork(after_in_child=in_child)


def worker_in_engine_core(parallel) -> None:
    """One worker (no tensor, pipeline or data parallelism): run it in the engine core's
    process (vLLM's `uni` executor), where the CPU platform would start a process of its own
    for it."""
    if parallel.world_size == 1 and parallel.data_parallel_size == 1:
        parallel.distributed_executor_backend = "uni"


def engine_core_cpus(vllm_config) -> list[int]:
    """The CPUs vLLM binds its first worker's OpenMP threads to: GOMP_CPU_AFFINITY when vLLM
    started the worker (its `mp` executor sets it), else what vLLM would have set."""
    given = os.environ.get("GOMP_CPU_AFFINITY", "")
    if given or vllm_config.parallel_config.distributed_executor_backend != "uni":
        return [int(cpu) for cpu in given.split()]
    try:
        from vllm.utils.ompmultiprocessing import OMPProcessManager
    except ImportError:  # a vLLM without it: the CPUs this process may run on
        return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    lists = OMPProcessManager(vllm_config).cpu_lists
    return list(lists[0]) if lists else []


def pin_openmp_threads(cpus: list[int]) -> None:
    """Pin this worker's OpenMP threads as OpenMP does when GOMP_CPU_AFFINITY (vLLM's CPUs for
    this worker, e.g. "0 1") is set before it loads: the calling thread to the first CPU, the
    pool's helpers to the others. Threads start with their creator's affinity, so the helpers
    OpenMP starts on the first parallel region are started while this thread holds the rest."""
    if not cpus or not hasattr(os, "sched_setaffinity"):
        return
    import torch

    os.sched_setaffinity(0, set(cpus[1:]) or {cpus[0]})
    torch.set_num_threads(len(cpus))
    torch.ones(1 << 20).add_(1)  # a parallel region: OpenMP starts its helper threads
    os.sched_setaffinity(0, {cpus[0]})
