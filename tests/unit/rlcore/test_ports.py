"""The inference ports a launcher takes and reserves (rlcore/processes/ports.py): 8000 when free,
else the next free one; a port reserved by another launcher counts as taken even before anything
listens on it; an explicit port is refused with its holder and the flag. Reservations are real
abstract sockets under a name of this test's own (the machine's real runs are never touched); which
TCP ports are taken is faked where a property is tested over generated sets of them."""

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlcore.errors import ConfigError
from rlcore.processes import ports


@pytest.fixture(autouse=True)
def own_names(monkeypatch):
    """Reservations under a prefix of this test process's own, dropped after each test."""
    monkeypatch.setattr(ports, "NAME_PREFIX", f"rl-port-test-{os.getpid()}-")
    yield
    ports.release_all()


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def base(monkeypatch) -> int:
    """A DEFAULT_PORT with the few ports above it that the tests use free too (the OS's pick,
    far from the real 8000, tried again while a busy machine holds one of them)."""
    for _ in range(200):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port <= 60000 and all(_free(port + i) for i in range(8)):
            break
    monkeypatch.setattr(ports, "DEFAULT_PORT", port)
    monkeypatch.setattr(ports, "SCAN_PORTS", 50)
    return port


def another_launcher(port: int) -> socket.socket:
    """The reservation another launcher would hold for `port` (close it to end that launcher)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(f"\0{ports.NAME_PREFIX}{port}")
    return sock


def test_the_default_port_when_free_and_it_stays_reserved(base):
    assert ports.choose("127.0.0.1") == base
    assert ports.reserved_elsewhere(base) is False  # ours, not another's
    with pytest.raises(OSError):
        another_launcher(base)  # a second launcher cannot reserve it now
    ports.release(base)
    another_launcher(base).close()  # released: free again


def test_a_port_reserved_by_a_starting_run_is_taken_before_anything_listens(base):
    held = another_launcher(base)
    try:
        assert ports.port_problem("127.0.0.1", base) is None  # nothing listens on it yet
        assert ports.choose("127.0.0.1") == base + 1
        with pytest.raises(ConfigError) as err:
            ports.claim("127.0.0.1", base, 1, "--inference.server.port")
    finally:
        held.close()
    message = str(err.value)
    assert f"port {base} on 127.0.0.1" in message and "--inference.server.port" in message
    assert f"reserved by another run's launcher, pid {os.getpid()} (" in message


def test_a_listening_port_is_skipped_or_refused_naming_its_holder(base):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", base))
        busy.listen()
        assert ports.choose("127.0.0.1") == base + 1
        with pytest.raises(ConfigError) as err:
            ports.claim("127.0.0.1", base, 1, "--inference.server.port")
    message = str(err.value)
    assert f"port {base} on 127.0.0.1 is in use" in message and f"pid {os.getpid()}" in message
    assert "--inference.server.port" in message and "\n" not in message


def test_replicas_get_a_block_of_free_ports_and_a_refused_block_keeps_nothing(base):
    held = another_launcher(base + 1)
    try:
        assert ports.choose("127.0.0.1", count=2) == base + 2  # base is free, base + 1 is not
        assert ports.reserved_elsewhere(base) is False and base not in ports._held
        with pytest.raises(ConfigError, match=f"port {base + 1} "):
            ports.claim("127.0.0.1", base, 2, "--inference.server.port")
        assert base not in ports._held  # the block's first port, reserved, was given back
    finally:
        held.close()


def test_a_dry_run_only_looks(base):
    assert ports.choose("127.0.0.1", reserve_it=False) == base
    ports.claim("127.0.0.1", base + 3, 2, "--inference.server.port", reserve_it=False)
    assert not ports._held
    another_launcher(base).close()


def test_one_process_never_takes_the_same_port_twice(base):
    first = ports.choose("127.0.0.1")
    assert ports.choose("127.0.0.1") == first + 1  # a second server of the same launcher


def test_nothing_free_names_the_flag(base, monkeypatch):
    monkeypatch.setattr(ports, "port_problem", lambda host, port: "Address already in use")
    with pytest.raises(ConfigError, match="--inference.server.port"):
        ports.choose("127.0.0.1")


def test_a_server_started_by_its_launcher_knows_its_port_is_held_for_it(monkeypatch):
    monkeypatch.setenv(ports.HELD_ENV, "8123")
    assert ports.held_for_me(8123) and not ports.held_for_me(8000)


@settings(max_examples=60, deadline=None)
@given(
    busy=st.sets(st.integers(0, 12), max_size=10),
    reserved=st.sets(st.integers(0, 12), max_size=4),
    count=st.integers(1, 3),
)
def test_choose_takes_the_first_block_free_of_listeners_and_reservations(busy, reserved, count):
    """For any ports taken (listening, faked) and reserved by others (real sockets), `choose`
    returns the first block of `count` ports that are neither, and reserves exactly it."""
    base = 20000 + os.getpid() % 20000
    original = (ports.DEFAULT_PORT, ports.SCAN_PORTS, ports.port_problem, ports.NAME_PREFIX)
    ports.DEFAULT_PORT, ports.SCAN_PORTS = base, 16
    ports.NAME_PREFIX = f"rl-port-test-{os.getpid()}-"
    ports.port_problem = lambda host, port: "in use" if port - base in busy else None
    others = [another_launcher(base + offset) for offset in reserved]
    try:
        taken = busy | reserved
        expected = next(
            (p for p in range(16 - count + 1) if not set(range(p, p + count)) & taken), None
        )
        if expected is None:
            with pytest.raises(ConfigError):
                ports.choose("127.0.0.1", count)
            assert not ports._held
        else:
            assert ports.choose("127.0.0.1", count) == base + expected
            assert set(ports._held) == set(range(base + expected, base + expected + count))
    finally:
        ports.release_all()
        for sock in others:
            sock.close()
        ports.DEFAULT_PORT, ports.SCAN_PORTS, ports.port_problem, ports.NAME_PREFIX = original
