"""`rl view` as a user starts it: the real command on a free port, its URL printed, every route
answered over HTTP (httpx), path escapes sent byte for byte (`..`, `%2e%2e`, `%2f`, an absolute
path, NUL, a link out of the folder) refused with a page and never answered with the file, the
token rule beyond loopback, bad PATHs refused with exit 2, and the runs' bytes and times unchanged
after browsing everything."""

import subprocess
import sys

import httpx
import pytest

from launcher.view.library import run_id
from tests.integration.view_server import REPO, ViewServer, raw_get
from tests.view_runs import make_evals_folder, make_run, snapshot, write_eval, write_samples

pytestmark = pytest.mark.integration
SECRET = "TOP-SECRET-CONTENT"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("view")
    root = base / "outputs"
    a = make_run(root / "a", steps=8)
    write_samples(a, range(4))
    write_eval(a / "evals", 4)
    b = make_run(root / "b", steps=8, lr=1e-5, status="running")  # copied: its pids are dead
    make_evals_folder(root / "ev")
    (base / "secret.txt").write_text(SECRET)
    (a / "logs" / "leak.log").symlink_to(base / "secret.txt")
    (root / "escape").symlink_to(base)
    return root, run_id(a.resolve()), run_id(b.resolve())


@pytest.fixture(scope="module")
def server(tree):
    root, _, _ = tree
    with ViewServer(str(root)) as running:
        yield running


def test_it_prints_a_loopback_url_and_answers_every_route(tree, server):
    root, a, b = tree
    assert server.url.startswith("http://127.0.0.1:") and "token" not in server.url
    urls = [
        "/",
        "/api/runs",
        f"/run/{a}",
        f"/api/run/{a}/curves",
        f"/api/run/{a}/logs",
        f"/run/{a}/rollouts",
        f"/run/{a}/rollouts?step=2",
        f"/api/run/{a}/rollouts?step=3",
        f"/run/{a}/evals",
        f"/run/{a}/evals?step=4",
        f"/api/run/{a}/evals?step=4",
        f"/compare?runs={a},{b}",
        f"/run/{b}",
        "/static/plotly.min.js",
        "/static/app.js",
    ]
    before = snapshot(root)
    with httpx.Client(base_url=server.base) as web:
        for url in urls:
            response = web.get(url)
            assert response.status_code == 200, (url, response.text[:300])
        statuses = {r["name"]: r["status"] for r in web.get("/api/runs").json()}
    assert statuses == {"a": "finished", "b": "not running here", "ev": "finished"}
    assert snapshot(root) == before  # bytes, modes and times of every entry


@pytest.mark.parametrize(
    "path",
    [
        "/at/../../secret.txt",
        "/at/%2e%2e/%2e%2e/secret.txt",
        "/at/%2E%2E%2Fsecret.txt",
        "/at/a%2f..%2f..%2fsecret.txt",
        "/at/%252e%252e/secret.txt",
        "/at//etc/passwd",
        "/at/a%00",
        "/at/escape/secret.txt",
        "/static/..%2f..%2fsafe.py",
        "/static/../app.py",
        "/../../../etc/passwd",
    ],
)
def test_path_escapes_are_refused_with_a_page(server, path):
    status, body = raw_get(server.base, path)
    assert status in (400, 404), (status, body[:200])
    assert SECRET.encode() not in body and b"root:" not in body and b"Traceback" not in body


def test_a_link_out_of_a_run_is_never_read(tree, server):
    _, a, _ = tree
    with httpx.Client(base_url=server.base) as web:
        assert SECRET not in web.get(f"/run/{a}").text
        assert SECRET not in web.get(f"/api/run/{a}/logs").text


def test_beyond_loopback_it_says_so_and_refuses_requests_without_the_token(tree):
    root, a, _ = tree
    with ViewServer(str(root), "--host", "0.0.0.0") as server:
        assert "every request needs the token" in server.output
        token = server.url.split("token=")[1]
        base = server.base.replace("0.0.0.0", "127.0.0.1")
        for path in ("/", f"/run/{a}", "/api/runs", "/static/plotly.min.js", "/at/a"):
            assert raw_get(base, path)[0] == 401, path
        assert raw_get(base, f"/?token={'x' * len(token)}")[0] == 401
        assert raw_get(base, "/api/runs", f"Authorization: Bearer {token}\r\n")[0] == 200
        with httpx.Client(base_url=base, follow_redirects=True) as web:
            assert web.get(f"/run/{a}?token={token}").status_code == 200  # cookie, redirect
            assert web.get(f"/run/{a}/rollouts").status_code == 200


def test_a_path_that_is_not_a_folder_exits_2_with_one_line(tmp_path):
    cmd = [sys.executable, "-m", "launcher.rl", "view", str(tmp_path / "nothere")]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "does not exist" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1
