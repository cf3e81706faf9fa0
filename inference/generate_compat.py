"""`/inference/v1/generate` as verifiers v1 expects it. Its client (the `renderers` package)
reads each completion logprob's token as `token_id:<id>`, which vLLM writes only in the text
output mode (with `--return-tokens-as-token-ids`), while a request that names no mode gets the
tokens mode. This ASGI middleware makes the text mode the default of that route; a request
that names a mode keeps it."""

import json

ROUTE = "/inference/v1/generate"


class TextModeByDefault:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != ROUTE or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        body = await read_body(receive)
        body = with_text_mode(body)
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        return await self.app({**scope, "headers": headers}, replay, send)


async def read_body(receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def with_text_mode(body: bytes) -> bytes:
    """The request body with `output_mode = "text"` unless it names one (or is not JSON)."""
    try:
        request = json.loads(body)
    except ValueError:
        return body
    if not isinstance(request, dict) or "output_mode" in request:
        return body
    request["output_mode"] = "text"
    return json.dumps(request).encode()


def add_generate_compat(app) -> None:
    """Put `TextModeByDefault` in front of `app`'s middleware (vLLM's `build_app` has already
    built the stack: it is rebuilt on the first request)."""
    from starlette.middleware import Middleware

    app.user_middleware.insert(0, Middleware(TextModeByDefault))
    app.middleware_stack = None
