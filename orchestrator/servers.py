"""Several inference servers behind one orchestrator: each generation and `/tokenize` request
goes to the least-loaded server that is up; a request whose server cannot be reached or times
out moves to another one (that server is left out for `DOWN_S`); weight swaps go to every
server and count only when every one of them answered the same way.

The pool holds the one HTTP client the orchestrator talks to its servers with (generation
included: each server's OpenAI client sends through it) and the run's admin token, read at the
first swap and again only when a server refuses it (an inference restarted alone writes a new
one).

Consumes: `client.base_url` (one URL or a list), `<output_dir>/admin_token`. Produces:
per-server request counts for the step's metrics. Waits for: each server's answers, within the
client's timeouts; while any request or swap is in flight on a server, the orchestrator records
that it waits on that server (rlcore.runs.waits: server i is the run's i-th inference server), so
`rl` sees whom a slow batch waits on."""

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx

from orchestrator.client import (
    AdminTokenError,
    OrchestratorError,
    server_root,
    update_weights,
    wait_for_server,
)
from rlcore.contracts.protocol import TOKENIZE_ROUTE, UPDATE_WEIGHTS_ROUTE
from rlcore.runs import waits

logger = logging.getLogger("orchestrator")
IN_FLIGHT = "completions for the rollouts in flight"
"""The wait every generation and /tokenize request is in (one entry per server while any is)."""
DOWN_S = 30.0
"""How long a server that failed a request is left out before it is tried again."""
# As many connections as OpenAI's own client allows: the pool's client carries generation.
LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=2.0)
"""Idle connections are dropped after 2 s: vLLM's server closes them after 5 s
(VLLM_HTTP_TIMEOUT_KEEP_ALIVE), and with both at 5 s a request sent on a connection the server
is closing that moment fails (a weight swap ended a run with `ReadError` that way)."""


@dataclass
class Server:
    base_url: str
    in_flight: int = 0
    served: int = 0
    """Generation requests answered."""
    tokenized: int = 0
    """/tokenize requests answered (they count as load too)."""
    down_until: float = 0.0

    @property
    def load(self) -> tuple[int, int]:
        return self.in_flight, self.served + self.tokenized


class ServerPool:
    def __init__(
        self,
        base_urls: list[str],
        timeout_s: float = 600.0,
        read_token: Callable[[], str | None] = lambda: None,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """`timeout_s`: of one request; `read_token`: the run's admin token (None: none);
        `transport`: what the HTTP client sends through (None: the network)."""
        self.servers = [Server(url) for url in base_urls]
        self.reported = [0] * len(base_urls)
        self.timeout_s = timeout_s
        self.read_token = read_token
        self.token: str | None = None
        self.transport = transport
        self._http: httpx.AsyncClient | None = None

    def __len__(self) -> int:
        return len(self.servers)

    @property
    def http(self) -> httpx.AsyncClient:
        """The pool's one HTTP client, opened on first use (inside the event loop)."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                timeout=self.timeout_s,
                limits=LIMITS,
                follow_redirects=True,
                transport=self.transport,
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()

    def pick(self, exclude: set[int]) -> int | None:
        """The index of the server for the next request: fewest in flight, then fewest answered,
        among those up and not in `exclude`; a server that is down only when none is up."""
        now = time.monotonic()
        candidates = [i for i in range(len(self.servers)) if i not in exclude]
        if not candidates:
            return None
        up = [i for i in candidates if self.servers[i].down_until <= now] or candidates
        return min(up, key=lambda i: self.servers[i].load)

    @asynccontextmanager
    async def busy(self, index: int):
        """Count a request in flight on server `index` while it runs (and record the wait on
        that server for `rl`)."""
        server = self.servers[index]
        server.in_flight += 1
        try:
            with waits.waiting(IN_FLIGHT, "inference", server=index):
                yield server
        finally:
            server.in_flight -= 1

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

    async def wait_ready(
        self,
        model: str,
        timeout_s: float,
        api_key: str = "EMPTY",
        seq_len: int = 0,
        nonce: str | None = None,
    ) -> None:
        """Every server healthy (proving `nonce`, when given: rlcore.processes.health) and serving
        `model` with room for `seq_len` tokens."""
        await asyncio.gather(
            *(
                wait_for_server(self.http, s.base_url, model, timeout_s, api_key, seq_len, nonce)
                for s in self.servers
            )
        )

    async def tokenize(self, body: dict[str, Any]) -> int:
        """The token count of a chat prompt (`body`: a /tokenize request), from the
        least-loaded server that is up; a server that cannot be reached is left out."""
        tried: set[int] = set()
        while True:
            index = self.pick(tried)
            assert index is not None
            async with self.busy(index) as server:
                url = server_root(server.base_url) + TOKENIZE_ROUTE
                try:
                    answer = await self.http.post(url, json=body)
                except httpx.TransportError as err:  # unreachable or timed out
                    tried.add(index)
                    self.mark_down(index, err)
                    if len(tried) == len(self.servers):
                        raise
                    continue
            answer.raise_for_status()
            server.tokenized += 1
            return int(answer.json()["count"])

    async def update_weights(
        self, requests: list[dict[str, Any]], timeout_s: float | None = None
    ) -> dict[str, Any] | None:
        """Send server i `requests[i]` (POST /update_weights), all at once; returns when every
        server answered. A server that refused or failed ends the run naming it; the answer
        they all gave (None: they have no swap route, as a plain vLLM server). `timeout_s`:
        for each answer (None: client.timeout_s)."""
        assert len(requests) == len(self.servers)
        if self.token is None:
            self.token = self.read_token()
        answers = await asyncio.gather(
            *(self._update_one(i, r, timeout_s or self.timeout_s) for i, r in enumerate(requests)),
            return_exceptions=True,
        )
        for answer in answers:  # in server order: the first failed server is named
            if isinstance(answer, BaseException):
                raise answer
        return self.common_answer(answers)

    async def _update_one(
        self, index: int, request: dict[str, Any], timeout_s: float
    ) -> dict[str, Any] | None:
        url, token = self.servers[index].base_url, self.token
        with waits.waiting(f"the swap to {swap_target(request)}", "inference", server=index):
            try:
                return await update_weights(self.http, url, request, timeout_s, token)
            except AdminTokenError:
                self.token = self.read_token()
                if self.token == token:
                    raise
                return await update_weights(self.http, url, request, timeout_s, self.token)

    def common_answer(self, answers: list[Any]) -> dict[str, Any] | None:
        """The servers' one answer: all swapped and serve the policy under one name, or none
        has a swap route; any other mix is an error naming the server that differs."""
        first, first_url = answers[0], self.servers[0].base_url
        for server, answer in zip(self.servers[1:], answers[1:], strict=True):
            if (answer is None) != (first is None):
                plain, other = server.base_url, first_url
                if answer is not None:
                    plain, other = other, plain
                raise OrchestratorError(
                    f"inference server {plain} has no {UPDATE_WEIGHTS_ROUTE} route but {other} "
                    "swapped its weights: every server of the run must be an `inference` "
                    "server, or none (a plain vLLM server keeps its weights)"
                )
            if answer is not None and answer.get("model") != first.get("model"):
                raise OrchestratorError(
                    f"inference server {server.base_url} serves the policy as "
                    f"{answer.get('model')!r} but {first_url} as {first.get('model')!r}: "
                    "every server of the run must serve it the same way (inference.lora on "
                    "all of them or none)"
                )
        return first


def swap_target(request: dict[str, Any]) -> str:
    """The policy a /update_weights body asks for, in words."""
    if "step" in request:
        return f"policy step {request['step']}"
    if "weight_dir" in request:
        return f"the policy in {request['weight_dir']}"
    return "a new policy"
