"""`rl view` takes a run folder as data, never trusted (issue #60): damaged, forged or huge files
give a page or a JSON error (never a 500 nor a traceback on the server's stderr), every answer is
bounded (texts and token lists cut with a way to page through the rest, files read once per
change), slow pages never hold up the runs list, log tails are redacted like commands' output,
and no redirect leaves the server."""

import asyncio
import json
import os
import time
import tracemalloc
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from launcher.view import archive
from launcher.view.app import make_app
from launcher.view.library import Library, run_id
from rlcore.contracts import samples_store
from tests.view_runs import (
    forge_step,
    make_run,
    renamed,
    sample_rows,
    write_eval,
    write_samples,
    write_step,
)

LOCAL = "http://127.0.0.1"
MiB = 2**20


def client(root: Path, **kwargs) -> TestClient:
    return TestClient(
        make_app(Library([root]), **kwargs), base_url=LOCAL, raise_server_exceptions=False
    )


def rid(path: Path) -> str:
    return run_id(path.resolve())


def run_pages(a: str) -> list[str]:
    return [
        "/",
        "/api/runs",
        f"/run/{a}",
        f"/api/run/{a}/curves",
        f"/api/run/{a}/logs",
        f"/run/{a}/rollouts",
        f"/run/{a}/rollouts?step=0&tokens=1",
        f"/api/run/{a}/rollouts?step=0",
        f"/run/{a}/evals",
        f"/run/{a}/evals?step=2",
        f"/api/run/{a}/evals?step=2",
    ]


def assert_pages_answer(web: TestClient, urls: list[str], capsys) -> None:
    for url in urls:
        response = web.get(url)
        assert response.status_code < 500, (url, response.status_code, response.text[:300])
        assert "Traceback" not in response.text
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error" not in err, err[-2000:]


# -- names and bytes that are not UTF-8 ---------------------------------------------------------
def test_a_folder_with_a_non_utf8_name_breaks_no_page(tmp_path, capsys):
    root = tmp_path / "outputs"
    good = make_run(root / "good")
    write_samples(good, range(1))
    bad = make_run(Path(os.fsdecode(os.fsencode(root) + b"/bad-\xff\xfe")) / "run")
    write_samples(bad, range(1))
    web = client(root)
    names = [r["name"] for r in web.get("/api/runs").json()]
    assert "good" in names and any(name.startswith("bad-") for name in names)
    assert_pages_answer(web, [*run_pages(rid(good)), *run_pages(rid(bad))], capsys)
    assert "bad-\ufffd\ufffd" in web.get("/").text


def test_non_utf8_bytes_in_metrics_and_log_names_break_no_page(tmp_path, capsys):
    run = make_run(tmp_path / "outputs" / "a")
    with (run / "metrics.jsonl").open("ab") as f:
        f.write(b'{"component": "trainer", "step": 9, "lo\xffss": 1.0, "loss": 0.5}\n')
        f.write(b'{"component": "evals", "step": 9, "env\\ud800/reward": 0.5}\n')
        f.write(b'{"component": "tr\\udcffainer", "step": 9, "loss": 0.5}\n')
    (run / "logs" / os.fsdecode(b"bad-\xff.log")).write_bytes(b"line \xff\xfe\n")
    web = client(tmp_path / "outputs")
    assert_pages_answer(web, run_pages(rid(run)), capsys)
    assert "bad-\ufffd" in web.get(f"/api/run/{rid(run)}/logs").json()


# -- the rollout archive ------------------------------------------------------------------------
def test_nan_and_infinities_in_the_archive_are_shown_as_words(tmp_path, capsys):
    run = make_run(tmp_path / "outputs" / "a")
    rows = sample_rows(0)
    rows["reward"][0], rows["advantage"][1] = float("nan"), float("inf")
    rows["token_logprob"][0][0] = float("-inf")
    write_step(run, 0, rows)
    web = client(tmp_path / "outputs")
    assert_pages_answer(web, run_pages(rid(run)), capsys)
    answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0").json()
    rewards = [m["reward"] for g in answer["groups"] for m in g["members"]]
    assert "NaN" in rewards


FOREIGN = {
    "group": pa.array(["x", "y"]),
    "member": pa.array([[1], [2]]),
    "reward": pa.array(["high", "low"]),
    "completion": pa.array([{"a": 1}, {"a": 2}]),
    "prompt": pa.array([b"\xff\x00", b"raw"]),
    "token_text": pa.array([[1, 2], [3]]),
    "token_logprob": pa.array(["a", "b"]),
    "env": pa.array([1.5, float("nan")]),
    "kept": pa.array(["yes", "no"]),
    "error": pa.array([3, 4]),
}


@pytest.mark.parametrize("format_1", [True, False], ids=["claims-format-1", "no-format"])
@pytest.mark.parametrize("columns", [FOREIGN, {"other": pa.array([1, 2])}], ids=["typed", "none"])
def test_a_foreign_parquet_schema_is_a_page(tmp_path, capsys, columns, format_1):
    """A file that claims format 1 is read with its foreign columns as missing, named on the
    page; one without the claim is a page saying it is not an archive rl wrote."""
    run = make_run(tmp_path / "outputs" / "a")
    (run / "samples").mkdir()
    table = pa.table(columns)
    if format_1:
        table = table.replace_schema_metadata(samples_store.metadata(0, 0))
    pq.write_table(table, run / "samples" / "step_0.parquet")
    web = client(tmp_path / "outputs")
    assert_pages_answer(web, run_pages(rid(run)), capsys)
    answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0")
    if not format_1:
        assert answer.status_code == 422 and "names no rollout archive format" in answer.text
        return
    missing = answer.json()["missing"]
    assert "token_mask (missing)" in missing and "step (missing)" in missing
    if columns is FOREIGN:
        assert "reward (string, not float64)" in missing and "group (string, not int32)" in missing


@pytest.mark.parametrize("column", samples_store.COLUMNS)
def test_a_column_renamed_by_the_writer_is_named_on_the_page(tmp_path, column):
    """Every column of the format: a file whose writer renamed it shows the rest and names it."""
    run = make_run(tmp_path / "outputs" / "a")
    write_samples(run, range(1), groups=1, members=2)
    forge_step(run, 0, renamed(column))
    web = client(tmp_path / "outputs")
    answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0")
    assert answer.status_code == 200 and answer.json()["missing"] == f"{column} (missing)"
    page = web.get(f"/run/{rid(run)}/rollouts?step=0&tokens=1")
    assert page.status_code == 200
    assert f'id="missing-columns">This step\'s file lacks {column} (missing)' in page.text


@pytest.mark.parametrize(
    "metadata, said",
    [
        ({b"rl.samples_format": b"2"}, "is rollout archive format 2, this rl reads format 1"),
        ({b"rl.step": b"0"}, "names no rollout archive format in its metadata"),
    ],
    ids=["format-2", "none"],
)
def test_an_archive_of_another_format_is_a_page_saying_so(tmp_path, capsys, metadata, said):
    run = make_run(tmp_path / "outputs" / "a")
    write_samples(run, range(1))
    forge_step(run, 0, lambda table: table.replace_schema_metadata(metadata))
    web = client(tmp_path / "outputs")
    assert_pages_answer(web, run_pages(rid(run)), capsys)
    page = web.get(f"/run/{rid(run)}/rollouts?step=0")
    assert page.status_code == 422 and said in page.text
    answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0")
    assert answer.status_code == 422 and said in answer.json()["error"]


def huge_completions(run: Path, num: int = 4, size: int = 64 * MiB) -> None:
    """A few-KB zstd archive holding `num` completions of `size` characters each."""
    rows = sample_rows(0, groups=1, members=num)
    for i in range(num):
        rows["completion"][i] = json.dumps([{"role": "assistant", "content": "x" * size}])
    rows["prompt"][0] = "p" * size  # not JSON: shown as text
    write_step(run, 0, rows)


@pytest.mark.parametrize(
    "size", [8 * MiB, pytest.param(64 * MiB, marks=pytest.mark.slow)], ids=["8MiB", "64MiB"]
)
def test_huge_completions_are_cut_and_paged_and_memory_stays_bounded(tmp_path, size):
    run = make_run(tmp_path / "outputs" / "a")
    huge_completions(run, size=size)
    assert (run / "samples" / "step_0.parquet").stat().st_size < 100_000
    web = client(tmp_path / "outputs")
    tracemalloc.start()
    try:
        page = web.get(f"/run/{rid(run)}/rollouts?step=0")
        answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.status_code == 200 and answer.status_code == 200
    assert len(page.content) < 2 * MiB and len(answer.content) < 2 * MiB
    assert peak < 200 * MiB, f"{peak / MiB:.0f} MiB"
    member = answer.json()["groups"][0]["members"][0]
    turn = member["turns"][0]
    assert turn["content"].startswith('[{"role": "assistant", "content": "xxx')
    assert len(turn["content"]) == archive.MAX_TEXT_CHARS and turn["more"].endswith("more bytes")
    assert "read the stored text" in page.text and f"/run/{rid(run)}/text?" in page.text
    query = {"source": "rollouts", "step": 0, "row": member["row"], "part": "completion"}
    more = web.get(f"/api/run/{rid(run)}/text", params={**query, "start": 10**6}).json()
    assert more["text"] == "x" * archive.TEXT_PAGE_BYTES and more["size"] > size
    assert more["start"] == 10**6 and more["next"] == 10**6 + archive.TEXT_PAGE_BYTES
    text_page = web.get(f"/run/{rid(run)}/text", params=query)
    assert text_page.status_code == 200 and len(text_page.content) < MiB
    assert 'id="next-text"' in text_page.text


@pytest.mark.parametrize(
    "num_tokens", [50_000, pytest.param(300_000, marks=pytest.mark.slow)], ids=["50k", "300k"]
)
def test_long_token_lists_are_cut_and_paged(tmp_path, num_tokens):
    run = make_run(tmp_path / "outputs" / "a")
    write_samples(run, range(1), groups=1, members=8, tokens=num_tokens)
    web = client(tmp_path / "outputs")
    started = time.monotonic()
    answer = web.get(f"/api/run/{rid(run)}/rollouts?step=0")
    assert answer.status_code == 200 and time.monotonic() - started < 10
    assert len(answer.content) < 8 * MiB, len(answer.content)
    member = answer.json()["groups"][0]["members"][0]
    assert len(member["tokens"]) == archive.MAX_TOKENS and member["num_tokens"] == num_tokens
    later = web.get(f"/api/run/{rid(run)}/rollouts?step=0&token_start={num_tokens - 10}").json()
    assert len(later["groups"][0]["members"][0]["tokens"]) == 10
    page = web.get(f"/run/{rid(run)}/rollouts?step=0&tokens=1")
    assert page.status_code == 200 and len(page.content) < 8 * MiB
    assert "token_start=" in page.text


# -- evaluations --------------------------------------------------------------------------------
def test_a_lone_surrogate_in_eval_results_is_shown_repaired(tmp_path, capsys):
    run = make_run(tmp_path / "outputs" / "a")
    folder = write_eval(run / "evals", 2)
    with (folder / "results.jsonl").open("a") as f:
        f.write('{"env": "rl-add-digits", "completion": "bad \\ud800 text", "reward": NaN}\n')
    summary = json.loads((folder / "summary.json").read_text())
    summary["env-\ud800"] = {"reward": float("nan")}
    (folder / "summary.json").write_text(json.dumps(summary))
    web = client(tmp_path / "outputs")
    assert_pages_answer(web, run_pages(rid(run)), capsys)
    assert "bad \ufffd" in web.get(f"/run/{rid(run)}/evals?step=2&page_index=0").text


def test_a_long_eval_answer_is_cut_and_its_stored_text_paged(tmp_path):
    run = make_run(tmp_path / "outputs" / "a")
    folder = write_eval(run / "evals", 2)
    answer = "y" * (3 * archive.MAX_TEXT_CHARS)
    row = {
        "env": "long",
        "example": 0,
        "rollout": 0,
        "reward": 1.0,
        "completion": [{"role": "assistant", "content": answer}],
    }
    with (folder / "results.jsonl").open("a") as f:
        f.write(json.dumps(row) + "\n")
    web = client(tmp_path / "outputs")
    samples = web.get(f"/api/run/{rid(run)}/evals?step=2&env=long").json()["samples"]["samples"]
    turn = samples[0]["turns"][0]
    assert turn["content"] == "y" * archive.MAX_TEXT_CHARS
    assert turn["more"] == f"{2 * archive.MAX_TEXT_CHARS:,} more characters"
    page = web.get(f"/run/{rid(run)}/evals?step=2&env=long").text
    assert "read the stored text" in page and "source=evals" in page
    stored = web.get(f"/api/run/{rid(run)}/text?{turn['link']}").json()
    assert answer in stored["text"] and stored["next"] is None


# -- run.json -------------------------------------------------------------------------------
def test_a_deep_run_json_is_listed_as_damaged(tmp_path, capsys):
    root = tmp_path / "outputs"
    make_run(root / "good")
    bad = make_run(root / "bad")
    (bad / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    web = client(root)
    listing = {r["name"]: r for r in web.get("/api/runs").json()}
    assert listing["good"]["status"] == "finished"
    assert listing["bad"]["status"] in ("unreadable", "damaged")
    assert "nested deeper" in listing["bad"]["why"]
    assert_pages_answer(web, run_pages(rid(bad)), capsys)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
@pytest.mark.parametrize("name", ["run.json", ".rl-run", "metrics.jsonl", "state/trainer.json"])
def test_a_fifo_or_a_link_to_dev_zero_never_hangs(tmp_path, capsys, kind, name):
    root = tmp_path / "outputs"
    run = make_run(root / "a")
    (run / "state").mkdir()
    (run / name).unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(run / name)
    else:
        (run / name).symlink_to("/dev/zero")
    started = time.monotonic()
    assert_pages_answer(client(root), run_pages(rid(run)), capsys)
    assert time.monotonic() - started < 10


def test_a_run_whose_reader_fails_is_listed_as_damaged_and_the_others_show(tmp_path, monkeypatch):
    root = tmp_path / "outputs"
    make_run(root / "good")
    make_run(root / "broken")
    from launcher.view import data

    real = data.RunData.config_data

    def failing(self):
        if self.root.name == "broken":
            raise PermissionError(13, "Permission denied", str(self.root / "configs"))
        return real(self)

    monkeypatch.setattr(data.RunData, "config_data", failing)
    web = client(root)
    listing = {r["name"]: r for r in web.get("/api/runs").json()}
    assert listing["good"]["status"] == "finished"
    broken = listing["broken"]
    assert broken["status"] == "damaged" and "Permission denied" in broken["why"]
    assert web.get("/").status_code == 200


# -- bounded reads ------------------------------------------------------------------------------
def sparse(path: Path, size: int) -> None:
    path.unlink(missing_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


def test_a_huge_metrics_file_without_a_newline_costs_the_runs_list_little(tmp_path):
    root = tmp_path / "outputs"
    run = make_run(root / "a")
    sparse(run / "metrics.jsonl", 2**30)
    web = client(root)
    tracemalloc.start()
    try:
        for _ in range(3):
            assert web.get("/api/runs").status_code == 200
            assert web.get(f"/api/run/{rid(run)}/curves").status_code == 200
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * MiB, f"{peak / MiB:.0f} MiB"


def test_an_unchanged_file_is_never_read_again_per_poll(tmp_path, monkeypatch):
    root = tmp_path / "outputs"
    run = make_run(root / "a")
    web = client(root)
    polled = ("/api/runs", f"/api/run/{rid(run)}/curves", f"/api/run/{rid(run)}/logs")
    for url in polled:
        web.get(url)
    from rlcore.files import readback

    reads = []
    real = readback.open_file

    def counting(path, root=None):
        reads.append(Path(path).name)
        return real(path, root)

    monkeypatch.setattr(readback, "open_file", counting)
    for _ in range(3):
        for url in polled:
            assert web.get(url).status_code == 200
    assert reads == [], reads


@pytest.mark.parametrize(
    "target",
    [
        "metrics.jsonl",
        "configs/trainer.toml",
        "logs/trainer.log",
        "evals/step_2/summary.json",
        "evals/step_2/results.jsonl",
        "samples/step_0.parquet",
        "state/trainer.json",
        ".rl-run",
    ],
)
def test_a_2_gib_sparse_file_anywhere_is_a_bounded_page(tmp_path, capsys, target):
    root = tmp_path / "outputs"
    run = make_run(root / "a")
    write_samples(run, range(1))
    write_eval(run / "evals", 2)
    (run / "state").mkdir()
    sparse(run / target, 2**31)
    web = client(root)
    tracemalloc.start()
    try:
        started = time.monotonic()
        assert_pages_answer(web, run_pages(rid(run)), capsys)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 10 and peak < 300 * MiB, f"{peak / MiB:.0f} MiB"


# -- secrets in logs ----------------------------------------------------------------------------
def test_log_tails_hide_secrets_as_commands_do(tmp_path):
    run = make_run(tmp_path / "outputs" / "a")
    secret = "K9sEcReT"
    with (run / "logs" / "trainer.log").open("a") as f:
        f.write(
            f"python -m trainer --wandb-api-key {secret}\n"
            f"Authorization: Bearer {secret}\napi_key={secret}\n"
            f"OPENAI_API_KEY={secret}\nX-Api-Key: {secret}\n"
        )
    web = client(tmp_path / "outputs")
    assert secret not in web.get(f"/run/{rid(run)}").text
    assert secret not in json.dumps(web.get(f"/api/run/{rid(run)}/logs").json())


# -- redirects ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "path",
    [
        "//evil.example/",
        "/\\evil.example/",
        "//evil.example/%2e",
        "/\\/evil.example",
        "///evil.example/",
    ],
)
def test_no_redirect_leaves_the_server(tmp_path, path):
    make_run(tmp_path / "outputs" / "a")
    token = "t" * 32
    web = client(tmp_path / "outputs", token=token, loopback=False)
    response = web.get(f"{LOCAL}{path}?token={token}", follow_redirects=False)
    location = response.headers.get("location", "/")
    assert response.status_code in (303, 400) and location.startswith("/"), location
    assert location[1:2] not in ("/", "\\"), location  # `//host` and `/\\host` leave the server


# -- slow pages ---------------------------------------------------------------------------------
def test_the_runs_list_answers_while_50_slow_pages_wait(tmp_path, monkeypatch):
    root = tmp_path / "outputs"
    run = make_run(root / "a")
    write_samples(run, range(1))

    def slow_page(*args, **kwargs):
        time.sleep(3)
        return {
            "step": 0,
            "envs": [],
            "groups": [],
            "page": 0,
            "num_pages": 1,
            "num_groups": 0,
            "num_rows": 0,
        }

    monkeypatch.setattr(archive, "groups_page", slow_page)
    app = make_app(Library([root]))

    async def load() -> float:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url=LOCAL, timeout=60) as web:
            await web.get("/api/runs")
            slow = [
                asyncio.create_task(web.get(f"/api/run/{rid(run)}/rollouts?step=0"))
                for _ in range(50)
            ]
            await asyncio.sleep(0.3)
            started = time.monotonic()
            answer = await web.get("/api/runs")
            took = time.monotonic() - started
            assert answer.status_code == 200
            for task in slow:
                task.cancel()
            await asyncio.gather(*slow, return_exceptions=True)
            return took

    took = asyncio.run(load())
    print(f"the runs list under 50 slow pages: {took:.3f} s")
    assert took < 2.0, f"the runs list took {took:.1f} s"
