"""A forked vLLM CPU worker pins its OpenMP threads as a spawned one's OpenMP does itself
(checked in a fresh interpreter: OpenMP must not have started its threads yet)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.integration


PROBE = textwrap.dedent(
    """
    import json, os, torch
    from inference.cpu_fork import pin_openmp_threads

    pin_openmp_threads([0, 1])  # after OpenMP loaded, as in a forked worker
    others = [sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")
              if int(t) != os.getpid()]
    print(json.dumps({"main": sorted(os.sched_getaffinity(0)), "others": others,
                      "threads": torch.get_num_threads()}))
    """
)


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or not {0, 1} <= os.sched_getaffinity(0),
    reason="needs CPUs 0 and 1",
)
def test_worker_threads_pinned_one_per_cpu():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOMP_", "OMP_"))}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["main"] == [0]
    assert seen["threads"] == 2
    assert [1] in seen["others"]  # OpenMP's helper, started on the second CPU
