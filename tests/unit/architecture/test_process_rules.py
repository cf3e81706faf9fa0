"""One owner per mechanism: process facts from /proc are read in rlcore.processes.procs alone (and
the machine's facts in rlcore.host.machine), every deadline-poll loop is rlcore.processes.poll's,
and every process is started by rlcore.processes.children. Read from
the source of the product and the bundled environments; benchmarks, which measure other
programs, are left out. The tests wait through the same poll loop as the product: the
deadline-loop rule reads them too. Each rule is also shown to catch a planted offender."""

import functools

from import_graph import REPO, tree_packages
from source_rules import (
    CHILDREN_MODULE,
    POLL_MODULE,
    PROC_READERS,
    clock_loops,
    modules,
    proc_paths,
    process_starts,
)

PLANTED_LOOP = """
import time
def wait(path, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.2)
"""
PLANTED_ASYNC_LOOP = """
import asyncio
async def wait(ready, end):
    while not ready() and asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.2)
"""
PLANTED_PROC = '''
def started(pid):
    """Reads /proc/<pid>/stat (a docstring may name it)."""
    return open(f"/proc/{pid}/stat").read().split()[21]
'''

PLANTED_STARTS = """
import os, subprocess
from subprocess import check_output as out
subprocess.run(["nvidia-smi"], timeout=20)
out(["squeue"])
os.execv("/bin/true", ["true"])
"""


@functools.cache
def checked_modules() -> dict:
    packages = {name: root for name, root in tree_packages().items() if name != "benchmarks"}
    found = modules(REPO, packages)
    assert {
        "rlcore/processes/procs.py",
        "launcher/stall.py",
        "environments/rl_tasks/link.py",
    } <= set(found)
    return found


def test_only_the_process_and_machine_modules_name_proc():
    offenders = {
        path: lines
        for path, file in checked_modules().items()
        if path not in PROC_READERS and (lines := proc_paths(file.read_text()))
    }
    assert offenders == {}, (
        f"read process facts through rlcore.processes.procs (psutil): {offenders}"
    )


@functools.cache
def suite_modules() -> dict:
    """Repository-relative path -> file, for every module under tests/ (the planted offenders
    above are strings: the rules read syntax trees, so they are no offence here)."""
    found = modules(REPO, {"tests": REPO})
    assert {"tests/inference_process.py", "tests/integration/helpers.py"} <= set(found)
    return found


def test_no_deadline_loop_outside_the_poll_module():
    offenders = {
        path: lines
        for path, file in {**checked_modules(), **suite_modules()}.items()
        if path != POLL_MODULE and (lines := clock_loops(file.read_text()))
    }
    assert offenders == {}, f"wait with rlcore.processes.poll.wait_until(_async): {offenders}"


def test_every_process_is_started_by_the_children_module():
    offenders = {
        path: lines
        for path, file in checked_modules().items()
        if path != CHILDREN_MODULE and (lines := process_starts(file.read_text()))
    }
    assert offenders == {}, (
        f"start processes with rlcore.processes.children (start, run): {offenders}"
    )


def test_the_rules_catch_planted_offenders():
    assert clock_loops(PLANTED_LOOP) == [5]
    assert clock_loops(PLANTED_ASYNC_LOOP) == [4]
    assert proc_paths(PLANTED_PROC) == [4]
    assert process_starts(PLANTED_STARTS) == [4, 5]  # os.execv replaces, starts nothing
    assert clock_loops("import time\nfor _ in range(3):\n    time.sleep(1)\n") == []
    assert proc_paths('"""Not /proc/self: a docstring."""\nx = "/procedure"\n') == []
