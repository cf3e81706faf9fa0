"""The one readiness probe of an inference server (GET /health), used by `rl`, the
orchestrator and the tests' process helper, and the one port check. httpx and psutil are
imported by the functions that use them, so `rl --help` never pays for them.

A launcher proves that the server answering is the one it started: it gives the server a
random nonce in its environment (SERVER_NONCE_ENV, new for every attempt) and asks /health with
a fresh challenge; the server answers with the challenge's HMAC keyed by the nonce
(`health_proof`, added by inference/admin.py). Another program that holds the port (it took
it while our server started, and our server died on bind) answers without the proof: the probe
raises `ForeignServer`, naming the port and the process that listens on it, and the launcher
stops before anything else (the admin token above all) is sent there. The nonce itself never
travels over HTTP."""

import hashlib
import hmac
import secrets
import socket

from rlcore.errors import ConfigError

HEALTH_ROUTE = "/health"
HEALTH_CHALLENGE_HEADER = "X-RL-Challenge"
"""A /health request's random challenge; a server started with the run's nonce answers it."""
HEALTH_PROOF_HEADER = "X-RL-Proof"
"""The answer: HMAC-SHA256 of the challenge keyed by the nonce (`health_proof`)."""

WILDCARD_HOSTS = ("0.0.0.0", "::", "")
SERVER_NONCE_ENV = "RL_SERVER_NONCE"
"""Set by a launcher for the inference servers it starts (and for its orchestrator): the key of
their /health proof."""


class ForeignServer(ConfigError):
    """Something answers at a server's address without proving it is the server started there."""


def server_url(host: str, port: int) -> str:
    """Where a server bound to `host:port` is reached from this machine (a wildcard bind is
    reached on loopback; IPv6 literals get brackets)."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1" if host != "::" else "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def new_nonce() -> str:
    return secrets.token_hex(16)


def health_proof(nonce: str, challenge: str) -> str:
    """What a server started with `nonce` answers to `challenge`."""
    return hmac.new(nonce.encode(), challenge.encode(), hashlib.sha256).hexdigest()


def probe_health(root_url: str, timeout_s: float = 5.0, nonce: str | None = None) -> str | None:
    """None when `root_url` + /health answers 200 (with `nonce`: and proves it), else what went
    wrong (for messages). ForeignServer when a 200 comes without the proof of `nonce`."""
    import httpx

    challenge = secrets.token_hex(16)
    headers = {HEALTH_CHALLENGE_HEADER: challenge} if nonce else {}
    url = root_url.rstrip("/") + HEALTH_ROUTE
    try:
        answer = httpx.get(url, headers=headers, timeout=timeout_s)
    except (httpx.HTTPError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    if answer.status_code != 200:
        return f"{HEALTH_ROUTE} answered {answer.status_code}"
    if nonce:
        proof = answer.headers.get(HEALTH_PROOF_HEADER, "")
        if not hmac.compare_digest(proof.encode(), health_proof(nonce, challenge).encode()):
            raise ForeignServer(foreign_message(answer.url.host, answer.url.port, url))
    return None


def foreign_message(host: str, port: int | None, url: str) -> str:
    holder = port_holder(port) if port else None
    who = holder or "a process that cannot be named from here"
    return (
        f"{url} answered, but not as the inference server this run started (no proof of the "
        f"run's nonce): port {port} on {host} is held by {who}. Stop it or pick another port "
        "with --inference.server.port (or --server.port); only /health was asked"
    )


def port_holder(port: int) -> str | None:
    """'pid N (`command`)' of the process listening on TCP `port` (any address); None when
    nothing listens there or its owner cannot be read (another user's process)."""
    import psutil

    from rlcore.processes.procs import command_of

    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for conn in connections:
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            if conn.pid is None:
                return None
            try:
                return f"pid {conn.pid} ({command_of(psutil.Process(conn.pid))})"
            except psutil.Error:
                return f"pid {conn.pid}"
    return None


def port_problem(host: str, port: int) -> str | None:
    """None when a server could bind `host:port` now, else why not (IPv4 and IPv6 hosts)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # Like uvicorn: a port whose old connections linger in TIME_WAIT is free to serve on.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return err.strerror or str(err)
    return None


def free_port(host: str) -> int:
    """A TCP port on `host` that nothing listens on now (the OS's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
