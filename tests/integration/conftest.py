"""Every test under tests/integration carries the `integration` marker (set it once per module:
`pytestmark = pytest.mark.integration`), so `-m integration` and `-m 'not integration'` select
the tiers exactly; a module without it stops the collection with its name.

`shared_server`: one inference server for the whole session, for the tests that need a server
but not one of their own (test_inference_server.py, test_orchestrator.py)."""

import os
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.helpers import SHARED_SERVER_TOKEN


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__) + os.sep
    unmarked = sorted(
        {
            str(item.path)
            for item in items
            if str(item.path).startswith(here) and not item.get_closest_marker("integration")
        }
    )
    if unmarked:
        raise pytest.UsageError(
            "modules in tests/integration without `pytestmark = pytest.mark.integration`: "
            + ", ".join(os.path.relpath(path) for path in unmarked)
        )


# -- one inference server for the tests that only need one -------------------------------------


@dataclass
class SharedServer:
    process: "InferenceProcess"  # noqa: F821 (imported inside the fixture)
    run: Path  # the server's run folder (`output_dir`): policies load from its weights/ only
    url: str  # http://127.0.0.1:<port>, without /v1


@pytest.fixture(scope="session")
def shared_server(tiny_model_dir, tmp_path_factory):
    """An `inference` server on the tiny model (fp32, filesystem transport, max_model_len 1024),
    started once per session: vLLM takes about a minute to start on 2 cores. Tests that write
    into its run folder empty it first (remove_run_files) and leave the base weights serving.
    At the end it must stop cleanly on SIGTERM, its engine with it, its token never logged."""
    import psutil

    from rlcore.runs.admin_token import ADMIN_TOKEN_ENV
    from rlcore.runs.rundir import RunDir
    from tests.inference_process import InferenceProcess
    from tests.integration.helpers import free_port

    root = tmp_path_factory.mktemp("shared_server")
    run = root / "server"
    RunDir(run).claim()
    config = root / "infer.toml"
    config.write_text(
        f'output_dir = "{run}"\n[model]\nname = "{tiny_model_dir}"\ndtype = "float32"\n'
        'max_model_len = 1024\n[cpu]\nkvcache_space_gib = 1\nmatmul_dtype = "model"\n'
    )
    args = ["@", str(config), "--server.port", str(free_port())]
    process = InferenceProcess(
        args, root / "inference.log", env={ADMIN_TOKEN_ENV: SHARED_SERVER_TOKEN}
    )
    process.start()
    try:
        process.wait_ready(timeout_s=600)
        engine = [
            child
            for child in psutil.Process(process.proc.pid).children(recursive=True)
            if "resource_tracker" not in " ".join(child.cmdline())
        ]
        assert engine, "vLLM's engine core should run in a child process"
        # the model worker runs inside the engine core (inference.cpu.separate_worker = false)
        assert len(engine) == 1 and "EngineCore" in engine[0].name(), engine
        yield SharedServer(process, run, process.url)
        process.proc.send_signal(signal.SIGTERM)
        code = process.proc.wait(timeout=120)
        # Checked before stop(), whose SIGKILL to the process group would hide strays.
        strays = [c for c in engine if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
    finally:
        process.stop(grace_s=60)
    log = process.log_path.read_text()
    assert SHARED_SERVER_TOKEN not in log
    assert "Traceback" not in log, process.log_tail()  # the engine's requested exit is quiet
    assert "inference: ready" in log and "inference: stopped" in log, process.log_tail()
    assert code == 0, f"exit code {code} after SIGTERM:\n{process.log_tail()}"
    assert not strays, f"{strays} outlived the server:\n{process.log_tail()}"
