"""The one readiness probe of an inference server (GET /health), used by `rl`, the
orchestrator and the tests' process helper, and the one port check. httpx is imported by the
probe itself, so `rl --help` never pays for it."""

import socket

from rlcore.protocol import HEALTH_ROUTE

WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def server_url(host: str, port: int) -> str:
    """Where a server bound to `host:port` is reached from this machine (a wildcard bind is
    reached on loopback; IPv6 literals get brackets)."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1" if host != "::" else "::1"
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def probe_health(root_url: str, timeout_s: float = 5.0) -> str | None:
    """None when `root_url` + /health answers 200, else what went wrong (for messages)."""
    import httpx

    try:
        status = httpx.get(root_url.rstrip("/") + HEALTH_ROUTE, timeout=timeout_s).status_code
    except (httpx.HTTPError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return None if status == 200 else f"{HEALTH_ROUTE} answered {status}"


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
