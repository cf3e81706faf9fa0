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


def test_probe_reads_the_status_of_a_live_server():
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    statuses = iter([200, 503])

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(next(statuses))
            self.end_headers()

        def log_message(self, *args):
            pass

    with ThreadingHTTPServer(("127.0.0.1", 0), Health) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}"
        try:
            assert probe_health(url) is None
            assert probe_health(url) == "/health answered 503"
        finally:
            server.shutdown()
