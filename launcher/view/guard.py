"""Who may ask `rl view` anything, checked before any route runs.

Bound to loopback (the default), requests need no token, but their Host header must name a
loopback address (a web page elsewhere cannot reach the server through DNS rebinding). Bound to
any other address, every request needs the server's token: `?token=` (once: it is then kept in
a cookie for that browser), the cookie, or `Authorization: Bearer`; compared in constant time.
Any request whose path carries `..` or an encoded `.`, `/`, `\\` or NUL is refused outright, and
the one redirect (after `?token=`) goes to a path of this server only (`local_path`)."""

import hmac
import ipaddress
import re

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

COOKIE = "rl_view_token"
LOOPBACK_NAMES = ("localhost",)
BAD_PATH = re.compile(r"%2e|%2f|%5c|%00|%25", re.I)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The host part of a Host header (`[::1]:8000` -> `::1`)."""
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def refusal(request: Request, status: int, message: str) -> Response:
    if request.url.path.startswith("/api/"):
        return JSONResponse({"error": message, "status": status}, status_code=status)
    page = f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{escape(message)}</p>"
    return HTMLResponse(page, status_code=status)


def local_path(path: str) -> str:
    """`path` as a redirect that stays on this server: one leading `/`, never `//host` or
    `/\\host` (which a browser reads as another site), no backslash or control character."""
    path = "".join(c for c in path.replace("\\", "/") if c.isprintable())
    return "/" + path.lstrip("/")


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class Guard(BaseHTTPMiddleware):
    def __init__(self, app, token: str | None, loopback: bool):
        super().__init__(app)
        self.token, self.loopback = token, loopback

    async def dispatch(self, request: Request, call_next):
        raw = request.scope.get("raw_path", b"").decode("latin-1")
        path = raw.split("?", 1)[0]
        if BAD_PATH.search(path) or "\x00" in request.url.path or ".." in path.split("/"):
            return refusal(request, 400, "refused: the path is encoded or leaves its folder")
        if self.loopback and not is_loopback(host_name(request.headers.get("host", ""))):
            return refusal(request, 403, "refused: this server answers loopback names only")
        if self.token is None:
            return await call_next(request)
        given = request.query_params.get("token")
        if given is not None and self.matches(given):
            target = request.url.remove_query_params("token")
            location = local_path(target.path) + (f"?{target.query}" if target.query else "")
            response = RedirectResponse(location, status_code=303)
            response.set_cookie(COOKIE, given, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "")
        sent = request.cookies.get(COOKIE) or bearer.removeprefix("Bearer ").strip()
        if not sent or not self.matches(sent):
            return refusal(
                request,
                401,
                "refused: this server needs its token (the URL rl view printed carries it)",
            )
        return await call_next(request)

    def matches(self, given: str) -> bool:
        token = self.token
        return token is not None and hmac.compare_digest(given.encode(), token.encode())
