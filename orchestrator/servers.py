"""Several inference servers behind one orchestrator: each generation request goes to the
least-loaded server that is up; a request whose server cannot be reached or times out moves to
another one (that server is left out for `DOWN_S`); weight updates go to every server.

Consumes: `client.base_url` (one URL or a list). Produces: per-server request counts for the
step's metrics. Waits for: nothing itself (the client's timeouts apply)."""

import logging
import time
from dataclasses import dataclass

logger = logging.getLogger("orchestrator")
DOWN_S = 30.0
"""How long a server that failed a request is left out before it is tried again."""


@dataclass
class Server:
    base_url: str
    in_flight: int = 0
    served: int = 0
    down_until: float = 0.0


class ServerPool:
    def __init__(self, base_urls: list[str]):
        self.servers = [Server(url) for url in base_urls]
        self.reported = [0] * len(base_urls)

    def __len__(self) -> int:
        return len(self.servers)

    def pick(self, exclude: set[int]) -> int | None:
        """The index of the server for the next request: fewest in flight, then fewest served,
        among those up and not in `exclude`; a server that is down only when none is up."""
        now = time.monotonic()
        candidates = [i for i in range(len(self.servers)) if i not in exclude]
        if not candidates:
            return None
        up = [i for i in candidates if self.servers[i].down_until <= now] or candidates
        return min(up, key=lambda i: (self.servers[i].in_flight, self.servers[i].served))

    def mark_down(self, index: int, error: Exception) -> None:
        server = self.servers[index]
        server.down_until = time.monotonic() + DOWN_S
        logger.warning(
            f"inference server {server.base_url} failed a request ({type(error).__name__}: "
            f"{error}); its requests go to the other servers for {DOWN_S:.0f} s"
        )

    def take_counts(self) -> dict[str, int]:
        """Requests each server answered since the last call, as metrics (several servers)."""
        if len(self.servers) < 2:
            return {}
        counts = {}
        for i, server in enumerate(self.servers):
            counts[f"requests/server_{i}"] = server.served - self.reported[i]
            self.reported[i] = server.served
        return counts
