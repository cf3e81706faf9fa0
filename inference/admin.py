"""The admin routes that swap the served weights: POST /update_weights (a transport's load
request, e.g. {"weight_dir": ...}) and POST /reload_weights. Both need `Authorization: Bearer
<token>` on every address (rlcore.runs.admin_token): a fresh token per start, written to the run
directory's `admin_token` (owner-only), where the orchestrator reads it.

Also the proof of identity on /health (rlcore.processes.health): a server started with a launcher's
nonce answers a request's challenge, so the launcher knows it talks to the server it started."""

import logging

from rlcore import faults
from rlcore.contracts.protocol import (
    RELOAD_WEIGHTS_ROUTE,
    UPDATE_WEIGHTS_ROUTE,
)
from rlcore.processes.health import (
    HEALTH_CHALLENGE_HEADER,
    HEALTH_PROOF_HEADER,
    HEALTH_ROUTE,
    health_proof,
)
from rlcore.runs.admin_token import authorized, issue_token
from rlcore.runs.rundir import RunDir

logger = logging.getLogger("inference")


def issue_admin_token(config) -> str:
    """The token of this start, in `<output_dir>/admin_token` (mode 600 from its first byte)."""
    run_dir = RunDir(config.output_dir)
    token = issue_token(run_dir)
    logger.info(f"admin routes need the token in {run_dir.admin_token}")
    return token


def add_admin_routes(app, loader, token: str) -> None:
    """The two routes, ahead of vLLM's so that its dev-mode routes of the same names never
    shadow them; `token` guards both."""
    from fastapi import APIRouter, Body, Header
    from fastapi.responses import JSONResponse

    from inference.weight_dirs import WeightDirError

    def refused(authorization: str | None) -> JSONResponse | None:
        if authorized(authorization, token):
            return None
        logger.info("refused an admin request without the right token")
        return JSONResponse(
            {"detail": "admin routes need `Authorization: Bearer <token>` (see admin_token)"},
            status_code=401,
        )

    async def answer(swap, what: str) -> JSONResponse:
        try:
            result = await swap
        except WeightDirError as err:
            logger.info(f"refused {what}: {err}")
            return JSONResponse({"detail": str(err)}, status_code=err.status)
        phases = ", ".join(f"{k} {v}" for k, v in result.get("phases_s", {}).items())
        logger.info(
            f"now serving {result['weights']} (swapped in {result['load_s']} s"
            f"{': ' + phases if phases else ''})"
        )
        return JSONResponse(result)

    router = APIRouter()
    updates = [0]

    def hang_if_asked() -> None:
        updates[0] += 1
        faults.hang_at_update(updates[0], logger)  # blocks the event loop: /health stops

    @router.post(UPDATE_WEIGHTS_ROUTE)
    async def update_weights(
        request: dict = Body(...),  # noqa: B008
        authorization: str | None = Header(None),  # noqa: B008
    ) -> JSONResponse:
        hang_if_asked()
        return refused(authorization) or await answer(loader.load(request), str(request))

    @router.post(RELOAD_WEIGHTS_ROUTE)
    async def reload_weights(authorization: str | None = Header(None)) -> JSONResponse:  # noqa: B008
        return refused(authorization) or await answer(loader.reload_base(), "the base weights")

    app.include_router(router)
    ours = app.router.routes[-len(router.routes) :]
    app.router.routes[:] = ours + app.router.routes[: -len(router.routes)]


def add_health_proof(app, nonce: str | None) -> None:
    """/health answers to a request with a challenge carry its proof under `nonce` (nothing
    without a nonce or a challenge). Plain ASGI, on /health only: no other route pays for it."""
    if not nonce:
        return
    challenge_key = HEALTH_CHALLENGE_HEADER.lower().encode()
    proof_key = HEALTH_PROOF_HEADER.lower().encode()

    class ProveHealth:
        def __init__(self, inner):
            self.inner = inner

        async def __call__(self, scope, receive, send):
            if scope["type"] != "http" or scope["path"] != HEALTH_ROUTE:
                return await self.inner(scope, receive, send)
            challenge = dict(scope["headers"]).get(challenge_key)
            if challenge is None:
                return await self.inner(scope, receive, send)
            proof = health_proof(nonce, challenge.decode(errors="replace")).encode()

            async def send_with_proof(message):
                if message["type"] == "http.response.start":
                    headers = [*message.get("headers", []), (proof_key, proof)]
                    message = {**message, "headers": headers}
                await send(message)

            await self.inner(scope, receive, send_with_proof)

    app.add_middleware(ProveHealth)
