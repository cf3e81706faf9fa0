"""A port that was free when checked and taken before the server binds it (another program's
outgoing connection or server in between) ends `inference` with one message naming the port and
the flags that change it, not vLLM's OSError traceback."""

import socket

from inference import server


def test_the_message_names_the_port_the_holder_and_the_flags():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        words = server.port_lost("127.0.0.1", port)
    assert words.startswith(f"port {port} on 127.0.0.1 was taken before this server could listen")
    assert "--server.port" in words and "--inference.server.port" in words
