"""One connection to a task's MCP server: stdio (the server is started here and always
stopped) or streamable HTTP (headers with `$VAR` expanded, never logged). The connection is
held by a task of its own, because the MCP client's task groups must be left in the task that
entered them; every call has a timeout."""

import asyncio
import contextlib
import json
import os
import sys
from typing import Any

from rl_tasks.taskfile import expand


class McpError(RuntimeError):
    """The server failed, hung or answered with an error; it costs the rollout, not the run."""


class McpLink:
    def __init__(self, name: str, spec: dict[str, Any], timeout_s: float):
        self.name, self.spec, self.timeout_s = name, spec, timeout_s
        self.session = None
        self._ready: asyncio.Future | None = None
        self._closing = asyncio.Event()
        self._task: asyncio.Task | None = None

    def describe(self) -> str:
        """The server for messages: its URL without user info and query, or its command; never
        its headers or environment."""
        if "url" in self.spec:
            return bare_url(self.spec["url"])
        return " ".join([self.spec["command"], *self.spec.get("args", [])])

    async def open(self) -> "McpLink":
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._hold())
        try:
            self.session = await asyncio.wait_for(asyncio.shield(self._ready), self.timeout_s)
        except TimeoutError:
            # The server may still fail later; that outcome is no longer anyone's to read.
            self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            await self.close()
            raise McpError(
                f"MCP server {self.name} ({self.describe()}) did not start within "
                f"{self.timeout_s:g} s"
            ) from None
        return self

    async def _hold(self) -> None:
        from mcp.client.session import ClientSession

        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport())
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self._ready.set_result(session)
                await self._closing.wait()
        except BaseException as err:  # noqa: BLE001 - any failure belongs to this rollout
            if not self._ready.done():
                reason = short(err)
                if "url" in self.spec:  # a transport error may quote the expanded URL
                    with contextlib.suppress(Exception):
                        reason = reason.replace(expand(self.spec["url"]), self.describe())
                self._ready.set_exception(
                    McpError(f"MCP server {self.name} ({self.describe()}) failed: {reason}")
                )

    def _transport(self):
        if "url" in self.spec:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            headers = {k: expand(v) for k, v in self.spec.get("headers", {}).items()}
            client = create_mcp_http_client(headers=headers)
            return streamable_http_client(expand(self.spec["url"]), http_client=client)
        from mcp.client.stdio import StdioServerParameters, stdio_client

        command = self.spec["command"]
        params = StdioServerParameters(
            command=sys.executable if command in ("python", "python3") else command,
            args=self.spec.get("args", []),
            env={k: expand(v) for k, v in self.spec.get("env", {}).items()} | passthrough(),
            cwd=self.spec.get("cwd"),
        )
        return stdio_client(params, errlog=sys.stderr)  # today's stderr, not the import's

    async def list_tools(self) -> list[dict[str, Any]]:
        answer = await self._timed("listing tools", self.session.list_tools())
        return [
            {"name": t.name, "description": t.description or "", "parameters": t.input_schema}
            for t in answer.tools
        ]

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """The tool's text answer, and whether the server flagged it as an error."""
        answer = await self._timed(f"calling {tool}", self.session.call_tool(tool, arguments))
        parts = [getattr(c, "text", None) for c in answer.content]
        text = "\n".join(p for p in parts if p is not None)
        if not text and answer.structured_content is not None:
            text = json.dumps(answer.structured_content)
        return text, bool(answer.is_error)

    async def _timed(self, what: str, awaitable):
        if self.session is None:
            raise McpError(f"MCP server {self.name} is not connected")
        try:
            return await asyncio.wait_for(awaitable, self.timeout_s)
        except TimeoutError:
            raise McpError(
                f"MCP server {self.name} hung {what} (over {self.timeout_s:g} s)"
            ) from None
        except McpError:
            raise
        except Exception as err:  # noqa: BLE001 - transport and protocol errors alike
            raise McpError(f"MCP server {self.name} failed {what}: {short(err)}") from None

    async def close(self) -> None:
        """Leave the connection (stopping a stdio server); never raises, never hangs."""
        self._closing.set()
        if self._task is None:
            return
        try:
            await asyncio.wait_for(asyncio.shield(self._task), self.timeout_s)
        except BaseException:  # noqa: BLE001
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self._task, 5)


def passthrough() -> dict[str, str]:
    """What a stdio server inherits besides MCP's defaults (PATH, HOME, ...) and its own
    `env`: the Python setup, so that `python` servers find the project's packages."""
    keep = ("PYTHONPATH", "VIRTUAL_ENV")
    return {k: os.environ[k] for k in keep if k in os.environ}


def bare_url(url: str) -> str:
    """`url` without user info and query (where tokens travel), for messages."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
    except ValueError:
        return "<a malformed URL>"
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def short(err: BaseException) -> str:
    """An exception (or the first of a group) as one line."""
    while isinstance(err, BaseExceptionGroup) and err.exceptions:
        err = err.exceptions[0]
    return f"{type(err).__name__}: {err}"[:300]
