"""The one health probe and port check: wildcard and IPv6 hosts, busy ports, dead servers."""

import socket

from rlcore.health import port_problem, probe_health, server_url


def test_server_url_reaches_wildcard_binds_on_loopback():
    assert server_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert server_url("::", 8000) == "http://[::1]:8000"
    assert server_url("::1", 9) == "http://[::1]:9"
    assert server_url("10.1.2.3", 80) == "http://10.1.2.3:80"


def test_port_check_sees_ipv4_and_ipv6_listeners():
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        with socket.socket(family, socket.SOCK_STREAM) as busy:
            busy.bind((host, 0))
            busy.listen()
            port = busy.getsockname()[1]
            assert port_problem(host, port) is not None
        assert port_problem(host, port) is None


def test_probe_names_what_failed():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connection refused
        problem = probe_health(f"http://127.0.0.1:{port}", timeout_s=1)
    assert problem is not None and "refused" in problem.lower()
