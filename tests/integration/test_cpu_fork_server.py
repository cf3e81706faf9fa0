"""The vLLM patches of inference/cpu_fork.py take effect in a real server (inference/patches.py
lists every patch and its test). Its platform patch makes vLLM fork one engine core with the
worker inside: the shared server's fixture (conftest.py) checks that its engine core is its one
child. Its worker patch pins the forked worker's OpenMP threads as GOMP_CPU_AFFINITY would
have: the engine core's main thread (whose first parallel region started them) on vLLM's first
CPU, the helpers on the others."""

import os

import psutil
import pytest

pytestmark = pytest.mark.integration


def engine_core(server) -> psutil.Process:
    engine = [
        child
        for child in psutil.Process(server.process.proc.pid).children(recursive=True)
        if "EngineCore" in child.name()
    ]
    assert len(engine) == 1, engine
    return engine[0]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one CPU: nothing to pin apart")
def test_the_forked_worker_pins_its_openmp_threads(shared_server):
    engine = engine_core(shared_server)
    threads = {t.id: os.sched_getaffinity(t.id) for t in engine.threads()}
    main = threads.pop(engine.pid)
    assert len(main) == 1, (main, threads)  # unpinned, it would have every CPU it may use
    helpers = [mask for mask in threads.values() if mask and not mask & main]
    assert helpers, threads  # OpenMP's helpers, on the other CPUs
