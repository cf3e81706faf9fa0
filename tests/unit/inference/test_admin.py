"""The admin routes: token-guarded on every address (loopback too); the token file is
owner-only from its first byte and never logged; comparison in constant time."""

import logging
from types import SimpleNamespace

import pytest

from inference.admin import add_admin_routes, issue_admin_token
from rlcore.config.weight_transfer import WeightLoader
from rlcore.runs.admin_token import ADMIN_TOKEN_ENV, authorized, read_token
from rlcore.runs.rundir import RunDir


class RecordingLoader(WeightLoader):
    """The loader side of the seam, recording what it was asked to serve."""

    def __init__(self):
        self.loaded = []

    async def load(self, request):
        self.loaded.append(request)
        return {"status": "ok", "weights": request["weight_dir"], "load_s": 0.0}

    async def reload_base(self):
        return {"status": "ok", "weights": "base", "load_s": 0.0}


def app_with(token, client_host: str = "testclient"):
    """The admin routes on an app, and a client whose requests come from `client_host`."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app, loader = FastAPI(), RecordingLoader()
    add_admin_routes(app, loader, token)
    return TestClient(app, client=(client_host, 50000)), loader


def config(host, out):
    return SimpleNamespace(server=SimpleNamespace(host=host), output_dir=out)


@pytest.mark.parametrize("client_host", ["127.0.0.1", "::1", "10.1.2.3"])
def test_every_caller_needs_the_run_token_loopback_included(
    tmp_path, caplog, monkeypatch, client_host
):
    """A request from the server's own machine is no more trusted than one from elsewhere."""
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    caplog.set_level(logging.INFO)
    token = issue_admin_token(config("0.0.0.0", tmp_path))
    assert token and read_token(RunDir(tmp_path)) == token
    client, loader = app_with(token, client_host)
    assert client.post("/update_weights", json={"weight_dir": "w"}).status_code == 401
    assert client.post("/reload_weights").status_code == 401
    assert loader.loaded == []
    good = {"Authorization": f"Bearer {token}"}
    assert client.post("/update_weights", json={"weight_dir": "w"}, headers=good).status_code == 200
    assert loader.loaded == [{"weight_dir": "w"}]
    assert token not in caplog.text


def test_a_given_token_is_shared_and_read_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(ADMIN_TOKEN_ENV, "given-by-rl")
    assert issue_admin_token(config("127.0.0.1", tmp_path)) == "given-by-rl"
    assert read_token(RunDir(tmp_path / "elsewhere")) == "given-by-rl"
    assert authorized("Bearer given-by-rl", "given-by-rl")
    assert not any(authorized(h, "given-by-rl") for h in (None, "", "given-by-rl", "Bearer x"))


def test_the_token_file_is_owner_only_and_the_right_token_opens(tmp_path, caplog, monkeypatch):
    monkeypatch.delenv(ADMIN_TOKEN_ENV, raising=False)
    caplog.set_level(logging.INFO)
    token = issue_admin_token(config("0.0.0.0", tmp_path))
    file = tmp_path / "admin_token"
    assert file.read_text().strip() == token and (file.stat().st_mode & 0o777) == 0o600
    assert token not in caplog.text
    client, loader = app_with(token)
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        answer = client.post("/update_weights", json={"weight_dir": "w"}, headers=headers)
        assert answer.status_code == 401 and "admin_token" in answer.json()["detail"]
        assert client.post("/reload_weights", headers=headers).status_code == 401
    assert loader.loaded == []
    good = {"Authorization": f"Bearer {token}"}
    assert client.post("/update_weights", json={"weight_dir": "w"}, headers=good).status_code == 200
    assert client.post("/reload_weights", headers=good).json()["weights"] == "base"


def test_body_must_be_a_json_object():
    client, loader = app_with("t")
    good = {"Authorization": "Bearer t"}
    assert client.post("/update_weights", content=b"not json", headers=good).status_code == 422
    assert loader.loaded == []


def test_health_answers_the_challenge_with_the_proof_of_the_nonce_only():
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from inference.admin import add_health_proof
    from rlcore.processes.health import HEALTH_CHALLENGE_HEADER, HEALTH_PROOF_HEADER, health_proof

    app = FastAPI()
    app.get("/health")(lambda: None)
    app.get("/v1/models")(lambda: {"data": []})
    add_health_proof(app, "the-nonce")
    client = TestClient(app)
    challenged = {HEALTH_CHALLENGE_HEADER: "abc"}
    answer = client.get("/health", headers=challenged)
    assert answer.status_code == 200
    assert answer.headers[HEALTH_PROOF_HEADER] == health_proof("the-nonce", "abc")
    assert health_proof("the-nonce", "abc") != health_proof("another", "abc")
    assert HEALTH_PROOF_HEADER not in client.get("/health").headers  # no challenge, no proof
    assert HEALTH_PROOF_HEADER not in client.get("/v1/models", headers=challenged).headers
    assert "the-nonce" not in str(answer.headers)  # the nonce itself never travels

    plain = FastAPI()
    plain.get("/health")(lambda: None)
    add_health_proof(plain, None)  # a server started without a launcher's nonce
    assert HEALTH_PROOF_HEADER not in TestClient(plain).get("/health", headers=challenged).headers
