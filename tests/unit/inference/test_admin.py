"""The admin routes: open on loopback, token-guarded beyond it; the token file is owner-only
and never logged."""

import logging
from types import SimpleNamespace

from inference.admin import add_admin_routes, is_loopback, issue_admin_token
from rlcore.weight_transfer import WeightLoader


class RecordingLoader(WeightLoader):
    """The loader side of the seam, recording what it was asked to serve."""

    def __init__(self):
        self.loaded = []

    async def load(self, request):
        self.loaded.append(request)
        return {"status": "ok", "weights": request["weight_dir"], "load_s": 0.0}

    async def reload_base(self):
        return {"status": "ok", "weights": "base", "load_s": 0.0}


def app_with(token):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    app, loader = FastAPI(), RecordingLoader()
    add_admin_routes(app, loader, token)
    return TestClient(app), loader


def config(host, out):
    return SimpleNamespace(server=SimpleNamespace(host=host), output_dir=out)


def test_loopback_needs_no_token(tmp_path):
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.5.0.1"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5"))
    assert issue_admin_token(config("127.0.0.1", tmp_path)) is None
    client, loader = app_with(None)
    assert client.post("/update_weights", json={"weight_dir": "w"}).status_code == 200
    assert loader.loaded == [{"weight_dir": "w"}]


def test_other_binds_need_the_run_token(tmp_path, caplog):
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
    client, loader = app_with(None)
    assert client.post("/update_weights", content=b"not json").status_code == 422
    assert loader.loaded == []
