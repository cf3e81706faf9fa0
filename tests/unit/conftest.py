"""The unit tier starts no process: a unit test that starts one fails, naming the call.

Python starts processes through the functions replaced here: `subprocess` (and so asyncio's
subprocesses and `os.popen`) through `Popen._execute_child`; `multiprocessing`'s spawn and
forkserver methods through `_posixsubprocess.fork_exec`; its fork method and `os.spawn*`
through `os.fork`. A replacement raises, and the test fails even if the code under test caught
the error. A C library that forks by itself would pass unseen (none used in tests/unit does).
A unit test imports no vLLM either (it starts helper processes, and takes a minute on 2 cores).
A test that needs a real process or vLLM belongs in tests/integration.

torch is imported here, before any guard: importing it the first time runs `ldconfig` (through
`ctypes.util.find_library`, looking for CUDA's libraries), which is torch's start-up, not the
code under test; otherwise whichever test imported torch first failed when run alone. So is
matplotlib's font manager: on a machine without its font cache (a fresh CI machine) its import
runs `fc-list` once to build it, and `rl plot`'s test failed there."""

import _posixsubprocess
import os
import stat
import subprocess
import sys

import pytest
import torch  # noqa: F401  (see above)
from matplotlib import font_manager  # noqa: F401  (see above)

GUARDED = (
    (subprocess.Popen, "_execute_child"),
    (_posixsubprocess, "fork_exec"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
)
CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def no_process(monkeypatch, request):
    calls: list[str] = []
    had_vllm = "vllm" in sys.modules

    def refuse(name: str):
        def refused(*args, **kwargs):
            calls.append(name)
            raise RuntimeError(f"{name}: a unit test starts no process (tests/unit/conftest.py)")

        return refused

    for owner, name in GUARDED:
        label = f"{getattr(owner, '__qualname__', owner.__name__)}.{name}"
        monkeypatch.setattr(owner, name, refuse(label))
    yield
    if request.node.stash.get(CALL_FAILED, False):
        return  # it has failed already
    if calls:
        pytest.fail(
            f"this unit test started a process ({', '.join(calls)}); move it to tests/integration"
        )
    if not had_vllm and "vllm" in sys.modules:
        pytest.fail("this unit test imported vLLM; move it to tests/integration")


@pytest.fixture(autouse=True)
def no_calibration(monkeypatch):
    """The estimate's speed measurement runs in a child process (rlcore/forecast/calibrate.py):
    off here, so a plan's estimate says it was not made; its arithmetic has tests of its own."""
    monkeypatch.setenv("RL_CALIBRATION", "off")


def pytest_collection_modifyitems(config, items):
    """No test under tests/unit is marked `integration` (those start processes)."""
    here = os.path.dirname(__file__) + os.sep
    marked = [
        item.nodeid
        for item in items
        if str(item.path).startswith(here) and item.get_closest_marker("integration")
    ]
    if marked:
        raise pytest.UsageError(f"integration tests under tests/unit: {', '.join(marked)}")


@pytest.fixture
def as_a_user(monkeypatch):
    """Read-only folders as a user sees them: root writes into them anyway, so under root
    `os.access` answers from the mode bits, as it does for any other user."""
    if os.geteuid() != 0:
        return
    real = os.access

    def access(path, mode, **kwargs):
        if not real(path, mode, **kwargs):
            return False
        return not mode & os.W_OK or bool(os.stat(path).st_mode & stat.S_IWUSR)

    monkeypatch.setattr(os, "access", access)
