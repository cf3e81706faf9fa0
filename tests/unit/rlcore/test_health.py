"""The one health probe and port check: wildcard and IPv6 hosts, busy ports, dead servers."""

import socket

from rlcore.processes.health import port_problem, probe_health, server_url


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


class ProvingServer:
    """An in-process HTTP server whose /health answers 200, with the proof of `nonce` (None:
    without any proof, as a stranger answers)."""

    def __init__(self, nonce: str | None):
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        from rlcore.processes.health import (
            HEALTH_CHALLENGE_HEADER,
            HEALTH_PROOF_HEADER,
            health_proof,
        )

        class Health(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                challenge = self.headers.get(HEALTH_CHALLENGE_HEADER)
                if nonce and challenge:
                    self.send_header(HEALTH_PROOF_HEADER, health_proof(nonce, challenge))
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_health_with_a_nonce_accepts_only_the_server_that_proves_it():
    import os

    import pytest

    from rlcore.processes.health import ForeignServer, new_nonce

    nonce = new_nonce()
    ours, stranger, other_run = ProvingServer(nonce), ProvingServer(None), ProvingServer("x")
    try:
        assert probe_health(ours.url, nonce=nonce) is None
        assert probe_health(stranger.url) is None  # without a nonce: any 200 (plain vLLM)
        for server in (stranger, other_run):
            with pytest.raises(ForeignServer) as refused:
                probe_health(server.url, nonce=nonce)
            message = str(refused.value)
            assert f"port {server.port} on 127.0.0.1 is held by pid {os.getpid()}" in message
            assert "not as the inference server this run started" in message
    finally:
        for server in (ours, stranger, other_run):
            server.close()


def test_the_port_holder_is_named_and_nothing_is_named_on_a_free_port():
    import os

    from rlcore.processes.health import port_holder

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert port_holder(port) is None  # bound, not listening
        sock.listen()
        assert port_holder(port).startswith(f"pid {os.getpid()} (`")
