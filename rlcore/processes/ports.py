"""The ports a launcher's servers will listen on: which ones, and their reservation.

An inference server binds its port only once vLLM has loaded the model, seconds to minutes
after its launcher found the port free; a second launcher checking in that window would find it
free too, and its server would collide with the first one's later. So a launcher reserves every
port its servers will listen on from its checks until it exits, and every launcher (and an
`inference` started alone) counts a reserved port as taken.

A reservation is an abstract Unix socket named after the port (`@rl-port-8000`), bound by the
holder and never listened on. Abstract names live in the network namespace, as TCP ports do
(one set per machine, per container with its own network, per SLURM node), need no file and no
permission (every user of the machine sees them), and the kernel frees the name when the holder
exits however it exits, `kill -9` included: no reservation outlives its launcher. The socket
is not inherited by the programs the launcher starts (close-on-exec).

When the user leaves the port unset, a launcher takes DEFAULT_PORT if it is free and unreserved,
else the next such port above it (`choose`); an explicit port is checked and reserved as given
(`claim`), and a taken one is a ConfigError naming it, its holder when it can be seen, and the
flag that changes it."""

import errno
import os
import socket

from rlcore.errors import ConfigError
from rlcore.processes.health import port_holder, port_problem

DEFAULT_PORT = 8000
"""An inference server's port when none is given: `inference` started alone listens on it, and a
launcher takes it when it is free."""
SCAN_PORTS = 1000
"""How far above DEFAULT_PORT a launcher looks for a free one (below the ephemeral range, which
outgoing connections draw from at any moment)."""
HELD_ENV = "RL_PORT_RESERVED"
"""Set by a launcher in the environment of the server it reserved a port for: that port, which
the server then does not count as taken by someone else."""
NAME_PREFIX = "rl-port-"
"""A reservation's abstract socket name is this and the port (`ss -xl` and psutil show it as
`@rl-port-8000`)."""

_held: dict[int, socket.socket] = {}
"""Ports this process reserves, and the socket that holds each (kept open to hold it)."""


def reserve(port: int) -> bool:
    """Reserve `port` for the rest of this process's life: False when another process holds it.
    Where abstract sockets are not available (not Linux), nothing is reserved and True returned:
    the TCP check and the health proof still guard the port."""
    if port in _held:
        return True
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except (AttributeError, OSError):
        return True
    try:
        sock.bind(f"\0{NAME_PREFIX}{port}")
    except OSError as err:
        sock.close()
        return err.errno != errno.EADDRINUSE
    _held[port] = sock
    return True


def release(port: int) -> None:
    """Give up this process's reservation of `port` (none: nothing happens)."""
    sock = _held.pop(port, None)
    if sock is not None:
        sock.close()


def release_all() -> None:
    """Give up every reservation of this process (a multi-node job's servers each reserve
    their own port on their node)."""
    for port in list(_held):
        release(port)


def reserved_elsewhere(port: int) -> bool:
    """Whether another process holds `port`'s reservation now (this process keeps none)."""
    if port in _held:
        return False
    if not reserve(port):
        return True
    release(port)
    return False


def reservation_holder(port: int) -> str | None:
    """'pid N (`command`)' of the process holding `port`'s reservation; None when it cannot be
    seen (another user's process) or none holds it."""
    import psutil

    from rlcore.processes.procs import command_of

    try:
        connections = psutil.net_connections(kind="unix")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.laddr == f"@{NAME_PREFIX}{port}" and conn.pid is not None:
            try:
                return f"pid {conn.pid} ({command_of(psutil.Process(conn.pid))})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def taken(host: str, port: int) -> str | None:
    """None when `port` on `host` is free and nobody else reserves it, else why (for
    messages): what binding it said and who listens, or who reserved it."""
    problem = port_problem(host, port)
    if problem is not None:
        holder = port_holder(port)
        return f"in use ({problem}; {f'by {holder}' if holder else 'another server or run?'})"
    if reserved_elsewhere(port):
        holder = reservation_holder(port) or "a process that cannot be named from here"
        return f"reserved by another run's launcher, {holder}, whose server is starting"
    return None


def claim(host: str, first: int, count: int, flag: str, reserve_it: bool = True) -> None:
    """Ports `first` .. `first + count - 1` as the user gave them: each free and unreserved
    (then reserved by this process, unless not `reserve_it`: a dry run), else a ConfigError
    naming the port, why and `flag`."""
    got: list[int] = []
    for port in range(first, first + count):
        why = taken(host, port)
        if why is None and reserve_it:
            if reserve(port):
                got.append(port)
            else:  # another launcher reserved it a moment ago
                why = taken(host, port) or "reserved by another run's launcher"
        if why is not None:
            for mine in got:
                release(mine)
            raise ConfigError(
                f"port {port} on {host} is {why}: stop it or pick another port with {flag} "
                "(or leave it unset: a free one is taken)"
            )


def choose(host: str, count: int = 1, reserve_it: bool = True) -> int:
    """The first port p from DEFAULT_PORT up such that p .. p + count - 1 are all free and
    unreserved on `host`, reserved by this process (unless not `reserve_it`: a dry run says
    which it would take); a ConfigError when there are none up to SCAN_PORTS above it."""
    for first in range(DEFAULT_PORT, DEFAULT_PORT + SCAN_PORTS - count + 1):
        got: list[int] = []
        for port in range(first, first + count):
            if not _take(host, port, reserve_it):
                break
            got.append(port)
        else:
            return first
        for port in got if reserve_it else ():
            release(port)
    raise ConfigError(
        f"no {count} free port(s) in a row on {host} from {DEFAULT_PORT} to "
        f"{DEFAULT_PORT + SCAN_PORTS - 1} for the inference server(s): give one with "
        "--inference.server.port"
    )


def _take(host: str, port: int, reserve_it: bool) -> bool:
    """Whether `port` is free for a new server of this process: never one it reserved already
    (for another server); reserved first, then checked (so two launchers never both take it)."""
    if port in _held:
        return False
    if not reserve_it:
        return port_problem(host, port) is None and not reserved_elsewhere(port)
    if not reserve(port):
        return False
    if port_problem(host, port) is not None:
        release(port)
        return False
    return True


def held_for_me(port: int) -> bool:
    """Whether this process's launcher reserved `port` for it (HELD_ENV)."""
    return os.environ.get(HELD_ENV) == str(port)
