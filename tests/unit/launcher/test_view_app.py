"""`rl view`'s routes through FastAPI's TestClient (in-process, real files): every page and JSON
route, bad input as a page or JSON error with its status (never a traceback), secrets redacted
again on display, the token rule beyond loopback, the loopback Host check, and nothing written
into the runs."""

import pytest
from fastapi.testclient import TestClient

from launcher.commands import run_command
from launcher.commands.view import token_for
from launcher.view.app import make_app
from launcher.view.library import Library, run_id
from rlcore.errors import ConfigError
from tests.view_runs import (
    make_evals_folder,
    make_run,
    sample_rows,
    snapshot,
    write_eval,
    write_samples,
)

LOCAL = "http://127.0.0.1"


@pytest.fixture
def runs(tmp_path):
    root = tmp_path / "outputs"
    a = make_run(root / "a", steps=6)
    write_samples(a, range(3))
    write_eval(a / "evals", 2)
    b = make_run(root / "b", steps=4, lr=1e-5, status="failed")
    make_evals_folder(root / "ev")
    (root / "not-a-run").mkdir()
    (root / "not-a-run" / "notes.txt").write_text("hello")
    return root, run_id(a.resolve()), run_id(b.resolve())


def client(root, **kwargs) -> TestClient:
    return TestClient(make_app(Library([root]), **kwargs), base_url=LOCAL)


def every_page(a: str, b: str) -> list[str]:
    return [
        "/",
        "/api/runs",
        f"/run/{a}",
        f"/api/run/{a}/curves",
        f"/api/run/{a}/logs",
        f"/run/{a}/rollouts",
        f"/run/{a}/rollouts?step=1&env=rl-add-digits&low=0.5",
        f"/run/{a}/rollouts?step=&env=&low=&high=",
        f"/run/{a}/rollouts?step=2&tokens=1",
        f"/api/run/{a}/rollouts?step=2",
        f"/run/{a}/evals",
        f"/run/{a}/evals?step=2&failed=true",
        f"/api/run/{a}/evals?step=2",
        f"/compare?runs={a},{b}",
        f"/run/{b}",
        f"/run/{b}/rollouts",
        f"/run/{b}/evals",
        "/static/app.js",
        "/static/view.css",
        "/static/plotly.min.js",
    ]


def test_every_route_answers_and_nothing_is_written(runs):
    root, a, b = runs
    before = snapshot(root)
    with client(root) as web:
        for url in every_page(a, b):
            response = web.get(url)
            assert response.status_code == 200, (url, response.text[:300])
        assert web.get("/at/a", follow_redirects=False).headers["location"] == f"/run/{a}"
    assert snapshot(root) == before


def test_the_pages_show_what_the_run_holds(runs):
    root, a, b = runs
    web = client(root)
    listing = web.get("/api/runs").json()
    assert [r["name"] for r in listing] == ["a", "b", "ev"]  # not-a-run is not listed
    first = listing[0]
    assert first["status"] == "finished" and first["model"] == "tiny-qwen3"
    assert first["envs"] == ["rl-add-digits"] and (first["step"], first["max_steps"]) == (6, 6)
    assert first["last5_reward"] is not None and first["machine"].startswith("AMD EPYC")
    page = web.get(f"/run/{a}").text
    assert "step 2: complete" in page and "trainer: line 59" in page and "[optim]" in page
    rollouts = web.get(f"/run/{a}/rollouts?step=1").text
    assert rollouts.count('<article class="member') == 16 and "tool call <b>add</b>" in rollouts
    assert "cut off" in rollouts and "tool server timed out" in rollouts
    tokens = web.get(f"/run/{a}/rollouts?step=2&tokens=1").text
    assert tokens.count('<span class="tok') == 16 * 12 and "rgba(230, 80, 60" in tokens
    assert "&lt;tool&gt;" in tokens and "<tool>" not in tokens  # model text is escaped
    evals = web.get(f"/run/{a}/evals").text
    assert "pass@4 <b>1.000</b>" in evals and "eval answer 5 try 0" in evals
    compare = web.get(f"/compare?runs={a},{b}").text
    assert "trainer.optim.lr" in compare and "1e-05" in compare and "3e-05" in compare
    assert "b failed" not in compare and web.get(f"/run/{b}").text.count("trainer failed") == 1


def test_secrets_in_configs_are_redacted_again_on_display(runs):
    root, a, b = runs
    web = client(root)
    for url in (f"/run/{a}", f"/compare?runs={a},{b}"):
        text = web.get(url).text
        assert "hunter2" not in text and "sk-secret-value" not in text, url
    assert "***" in web.get(f"/run/{a}").text


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("/run/nosuchid", 404),
        ("/run/{a}/rollouts?step=99", 404),
        ("/run/{a}/rollouts?step=abc", 400),
        ("/run/{a}/rollouts?low=abc", 400),
        ("/run/{a}/rollouts?high=nan", 400),
        ("/run/{a}/evals?step=7", 404),
        ("/compare?runs={a}", 400),
        ("/compare?runs={a},{a}", 400),
        ("/at/not-a-run", 404),
        ("/at/nothere", 404),
        ("/at/%2e%2e/outputs", 400),
        ("/at/a%2f..%2f..", 400),
        ("/at/a%00", 400),
        ("/static/..%2fapp.py", 400),
        ("/static/app.py", 404),
    ],
)
def test_bad_input_is_a_page_with_its_status(runs, url, status):
    root, a, _ = runs
    response = client(root).get(url.format(a=a))
    assert response.status_code == status, response.text
    assert "<h1" in response.text and "Traceback" not in response.text


def test_bad_input_under_api_is_json(runs):
    root, a, _ = runs
    response = client(root).get(f"/api/run/{a}/rollouts?step=99")
    assert response.status_code == 404 and response.json()["error"].startswith("no rollouts")


def test_a_torn_archive_and_a_torn_metrics_line_are_named(runs):
    root, a, _ = runs
    path = root / "a" / "samples" / "step_1.parquet"
    path.write_bytes(b"PAR1 torn")
    with (root / "a" / "metrics.jsonl").open("a") as f:
        f.write('{"component": "trainer", "st\n')
    web = client(root)
    response = web.get(f"/run/{a}/rollouts?step=1")
    assert response.status_code == 422 and "not a readable rollout archive step" in response.text
    assert web.get(f"/run/{a}").status_code == 200


def test_the_rollouts_page_shows_what_the_writer_wrote_token_mask_included(runs):
    """The fixture's files come from the one writer (rlcore.contracts.samples_store): a column it
    renames or drops fails here, as the page would lose it."""
    root, a, _ = runs
    web = client(root)
    answer = web.get(f"/api/run/{a}/rollouts?step=1").json()
    written = sample_rows(1)
    assert answer["missing"] == ""
    for group in answer["groups"]:
        for member in group["members"]:
            row = member["row"]
            assert [t["t"] for t in member["tokens"]] == written["token_text"][row]
            assert [t["policy"] for t in member["tokens"]] == written["token_mask"][row]
            assert member["kept"] == written["kept"][row]
            assert member["reward"] == written["reward"][row]
    page = web.get(f"/run/{a}/rollouts?step=1&tokens=1").text
    assert page.count("env-tok") == sum(not m for mask in written["token_mask"] for m in mask)
    assert 'id="missing-columns"' not in page


def test_a_run_without_an_archive_says_so(runs):
    root, _, b = runs
    assert "has no rollout archive" in client(root).get(f"/run/{b}/rollouts").text


def test_a_link_out_of_a_run_is_not_followed(runs, tmp_path):
    root, a, _ = runs
    secret = tmp_path / "secret.log"
    secret.write_text("do not show me\n")
    (root / "a" / "logs" / "stolen.log").symlink_to(secret)
    make_run(tmp_path / "elsewhere" / "x")
    (root / "linked").symlink_to(tmp_path / "elsewhere")
    web = client(root)
    assert "do not show me" not in web.get(f"/run/{a}").text
    assert "do not show me" not in str(web.get(f"/api/run/{a}/logs").json())
    assert web.get("/at/linked/x").status_code == 400
    assert "x" not in [r["name"] for r in web.get("/api/runs").json()]


def test_beyond_loopback_every_request_needs_the_token(runs):
    root, a, _ = runs
    web = client(root, token="t" * 32, loopback=False)
    for url in ("/", f"/run/{a}", "/api/runs", "/static/plotly.min.js", "/run/nosuch"):
        assert web.get(url).status_code == 401, url
    assert web.get("/", params={"token": "x" * 32}).status_code == 401
    bearer = web.get("/api/runs", headers={"Authorization": "Bearer " + "t" * 32})
    assert bearer.status_code == 200
    given = web.get(f"/run/{a}?token={'t' * 32}", follow_redirects=False)
    assert given.status_code == 303 and given.headers["location"] == f"/run/{a}"
    assert web.get(f"/run/{a}").status_code == 200  # the cookie it set
    web.cookies.clear()
    assert web.get(f"/run/{a}").status_code == 401


def test_on_loopback_a_foreign_host_name_is_refused(runs):
    root, _, _ = runs
    web = client(root)
    assert web.get("/", headers={"host": "evil.example:8765"}).status_code == 403
    assert web.get("/", headers={"host": "localhost:8765"}).status_code == 200
    assert web.get("/", headers={"host": "[::1]:8765"}).status_code == 200


def test_the_token_rule(monkeypatch):
    assert token_for("127.0.0.1", None) is None and token_for("localhost", None) is None
    assert len(token_for("0.0.0.0", None)) >= 32
    monkeypatch.setenv("VIEW_TOKEN", "short")
    with pytest.raises(ConfigError, match="VIEW_TOKEN"):
        token_for("0.0.0.0", "VIEW_TOKEN")
    monkeypatch.setenv("VIEW_TOKEN", "a-long-enough-token-1234")
    assert token_for("10.0.0.1", "VIEW_TOKEN") == "a-long-enough-token-1234"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["{root}/nothere"], "does not exist"),
        (["{root}/a/metrics.jsonl"], "is not a folder"),
        (["{root}", "--port", "70000"], "is not a port"),
        (["{root}", "--port", "x"], "invalid int value"),
        (["{root}", "--host", "no.such.host.invalid"], "is not an address"),
        (["{root}", "--token-env", "RL_VIEW_UNSET_VAR"], "RL_VIEW_UNSET_VAR"),
    ],
)
def test_bad_arguments_exit_2_naming_the_problem(runs, capsys, args, words):
    root, _, _ = runs
    assert run_command("view", [a.format(root=root) for a in args]) == 2
    err = capsys.readouterr().err
    assert words in err and err.startswith("rl view: error:"), err
