"""The token that guards inference's weight-swap routes (`/update_weights`, `/reload_weights`),
on every address, loopback included: anyone on a shared machine can reach loopback. Inference
writes a fresh token per start (or the one `rl` gives all of a run's servers, RL_ADMIN_TOKEN)
to `<output_dir>/admin_token`, owner-only from its first byte; the orchestrator reads it there
(or from RL_ADMIN_TOKEN) and sends `Authorization: Bearer <token>`."""

import hmac
import os
import secrets

from rlcore.files.atomic import atomic_write_text
from rlcore.files.readback import SMALL, Damaged, read_text
from rlcore.runs.rundir import RunDir

ADMIN_TOKEN_ENV = "RL_ADMIN_TOKEN"
"""A token given by `rl` (the same for all of a run's servers), or given by hand to an
orchestrator whose output_dir is not the server's."""


def new_token() -> str:
    return secrets.token_urlsafe(32)


def issue_token(run_dir: RunDir) -> str:
    """RL_ADMIN_TOKEN or a fresh token, written to the run's `admin_token` (mode 600)."""
    token = os.environ.get(ADMIN_TOKEN_ENV) or new_token()
    atomic_write_text(run_dir.admin_token, token + "\n", mode=0o600)
    return token


def read_token(run_dir: RunDir) -> str | None:
    """RL_ADMIN_TOKEN, else the token inference wrote into the run folder; None if neither."""
    if os.environ.get(ADMIN_TOKEN_ENV):
        return os.environ[ADMIN_TOKEN_ENV]
    try:
        return read_text(run_dir.admin_token, SMALL, run_dir.root).strip() or None
    except (FileNotFoundError, Damaged):
        return None


def authorized(header: str | None, token: str) -> bool:
    """Whether an Authorization header carries `token`, compared in constant time."""
    expected = f"Bearer {token}".encode()
    return hmac.compare_digest((header or "").encode(), expected)
