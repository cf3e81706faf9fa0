"""`inference` where its port is taken between the launcher's check and vLLM's bind: one
message naming the port and the flags (inference/server.py `port_lost`), any other bind failure
as it was. In the integration tier: importing vLLM starts a process (py-cpuinfo runs `file`)."""

import asyncio
import errno
import signal

import pytest

from inference import server
from inference.config import InferenceConfig
from rlcore.errors import ConfigError

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def signal_handlers():
    """serve() installs its startup handlers for SIGTERM and SIGINT: put pytest's back."""
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)


def test_a_port_taken_before_the_bind_is_a_config_error(monkeypatch):
    from vllm.entrypoints.launchers import launcher

    def taken(args, reuse_port=False):  # what the kernel answers bind() for a taken port
        raise OSError(errno.EADDRINUSE, "Address already in use")

    monkeypatch.setattr(launcher, "setup_server", taken)
    config = InferenceConfig.model_validate({"server": {"port": 8123}})
    with pytest.raises(ConfigError, match="port 8123 on 127.0.0.1 was taken before"):
        asyncio.run(server.serve(None, config, "model", 0.0))

    def refused(args, reuse_port=False):  # any other failure stays as it is
        raise OSError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(launcher, "setup_server", refused)
    with pytest.raises(PermissionError):
        asyncio.run(server.serve(None, config, "model", 0.0))
