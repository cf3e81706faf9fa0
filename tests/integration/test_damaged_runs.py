"""A run folder is data, never trusted (a property over generated damage): any file a run holds
replaced by random bytes, a FIFO, a link to /dev/zero, a 2 GiB sparse file or JSON nested
100,000 deep, or a name that is not UTF-8; for each, `rl status`, `rl list`, `rl logs`,
`rl plot`, `rl delete` (on a second copy) and every `rl view` page answer within 10 s, with
lines or a page and no traceback, in a process that stays under 500 MB."""

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.commands import run_command
from tests import view_runs

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning"),
]

TARGETS = (
    ".rl-run",
    "run.json",
    "state/trainer.json",
    "metrics.jsonl",
    "logs/trainer.log",
    "samples/step_1.parquet",
    "evals/step_2/summary.json",
    "evals/step_2/results.jsonl",
    "configs/rl.toml",
)
DAMAGES = ("bytes", "fifo", "dev-zero", "sparse", "deep", "bad-name")
TIME_LIMIT_S = 10.0
MEMORY_LIMIT = 500 * 2**20
ANSWER_LIMIT = 20 * 2**20
ROOT = Path(__file__).resolve().parents[2]
"""No page may answer with more than this (the view's pages are bounded well below it)."""


def build_run(root: Path) -> Path:
    view_runs.make_run(root, steps=4)
    view_runs.write_samples(root, range(4))
    view_runs.write_eval(root / "evals", 2)
    (root / "state").mkdir()
    view_runs.write_json(root / "state" / "trainer.json", {"pid": 999_999, "waits": []})
    return root


def damage(root: Path, target: str, kind: str, data: bytes) -> None:
    """Replace `root/target` with what `kind` names (bad-name: a sibling with a non-UTF-8
    name, holding `data`, and the run's parent folder named so too is made by the caller)."""
    path = root / target
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "bad-name":
        bad = path.parent / os.fsdecode(b"\xff\xfe" + path.name.encode())
        bad.write_bytes(data)
        return
    path.unlink(missing_ok=True)
    if kind == "bytes":
        path.write_bytes(data)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "sparse":
        with path.open("wb") as f:
            f.truncate(2**31)
    elif kind == "deep":
        path.write_text("[" * 100_000 + "]" * 100_000)


def bounded_call(call, what: str):
    """`call()` in a thread: its result, and the text it printed; fails on a hang or an
    exception (a traceback)."""
    result, out = {}, io.StringIO()

    def target():
        try:
            result["value"] = call()
        except BaseException as err:  # noqa: BLE001 - reported below
            result["error"] = err

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        worker.join(TIME_LIMIT_S)
    assert not worker.is_alive(), f"{what} took over {TIME_LIMIT_S} s"
    assert "error" not in result, f"{what} raised {result.get('error')!r}"
    text = out.getvalue()
    assert "Traceback" not in text, f"{what} printed a traceback:\n{text[-2000:]}"
    return result["value"], text


def check_commands(run: Path, copy: Path) -> None:
    image = str(run.parent / "p.png")
    for name, args in (
        ("status", [str(run)]),
        ("list", [str(run.parent)]),
        ("logs", [str(run)]),
        ("plot", [str(run), "--out", image]),
        ("delete", [str(copy), "--yes"]),
    ):
        code, text = bounded_call(lambda n=name, a=args: run_command(n, a), f"rl {name}")
        assert code in (0, 1, 2), f"rl {name} returned {code!r}"
        assert len(text) < 200_000, f"rl {name} printed {len(text)} characters"


def view_paths(client) -> list[str]:
    answer = client.get("/api/runs")
    assert answer.status_code == 200, f"/api/runs: {answer.status_code} {answer.text[:300]}"
    runs = answer.json()
    paths = ["/", "/api/runs"]
    for run in runs:
        rid = run["id"]
        paths += [
            f"/run/{rid}",
            f"/api/run/{rid}/curves",
            f"/api/run/{rid}/logs",
            f"/run/{rid}/rollouts",
            f"/run/{rid}/rollouts?step=1&tokens=true",
            f"/api/run/{rid}/rollouts?step=1",
            f"/run/{rid}/evals",
            f"/api/run/{rid}/evals?step=2",
        ]
    if len(runs) >= 2:
        paths.append(f"/compare?runs={runs[0]['id']},{runs[1]['id']}")
    return paths


def check_view(folder: Path) -> None:
    from fastapi.testclient import TestClient

    from launcher.view.app import make_app
    from launcher.view.library import Library

    app = make_app(Library([folder]))
    client = TestClient(app, base_url="http://127.0.0.1", raise_server_exceptions=False)
    paths, _ = bounded_call(lambda: view_paths(client), "rl view's runs list")
    for path in paths:
        answer, _ = bounded_call(lambda p=path: client.get(p), f"rl view {path}")
        assert answer.status_code < 500, f"{path}: {answer.status_code} {answer.text[:300]}"
        assert len(answer.content) < ANSWER_LIMIT, f"{path}: {len(answer.content)} bytes"


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    return build_run(tmp_path_factory.mktemp("template") / "run")


def fresh_copy(template: Path, where: Path) -> Path:
    import shutil

    shutil.copytree(template, where, symlinks=True)
    return where


def probe(run: Path, copy: Path, parent: Path) -> None:
    """The checks in a child process of their own, so that a hang or a runaway read is ended
    with it, and its peak memory is its own: the child watches its resident size and exits
    the moment it passes MEMORY_LIMIT."""
    code = f"""
import os, sys, threading, time
from pathlib import Path
import psutil
def watch():
    me = psutil.Process()
    while True:
        if me.memory_info().rss > {MEMORY_LIMIT}:
            print("over the memory limit", flush=True)
            os._exit(3)
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
from tests.integration.test_damaged_runs import check_commands, check_view
try:
    check_commands(Path(sys.argv[1]), Path(sys.argv[2]))
    check_view(Path(sys.argv[3]))
except AssertionError as err:
    print(err, flush=True)
    os._exit(1)
os._exit(0)
"""
    args = [os.fsencode(p) for p in (run, copy, parent)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        timeout=TIME_LIMIT_S * 30,
        cwd=ROOT,
    )
    said = (
        done.stdout.decode(errors="replace")[-3000:] + done.stderr.decode(errors="replace")[-3000:]
    )
    assert done.returncode == 0, said


EXAMPLES = int(os.environ.get("RL_DAMAGE_EXAMPLES", "12"))
SLOW_IS_FINE = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=SLOW_IS_FINE)
@given(
    target=st.sampled_from(TARGETS),
    kind=st.sampled_from(DAMAGES),
    data=st.binary(max_size=512),
    bad_parent=st.booleans(),
)
def test_every_command_and_page_survives_a_damaged_run(
    template, tmp_path_factory, target, kind, data, bad_parent
):
    base = tmp_path_factory.mktemp("damaged")
    parent = base / (os.fsdecode(b"runs-\xff") if bad_parent else "runs")
    run = fresh_copy(template, parent / "run")
    copy = fresh_copy(template, base / "copy" / "run")
    fresh_copy(template, parent / "healthy")
    for root in (run, copy):
        damage(root, target, kind, data)
    probe(run, copy, parent)


@pytest.mark.slow
@pytest.mark.parametrize("kind", DAMAGES)
@pytest.mark.parametrize("target", TARGETS)
def test_every_damage_of_every_file(template, tmp_path, target, kind):
    """The whole matrix the property draws from, each case once."""
    parent = tmp_path / os.fsdecode(b"runs-\xff")
    run, copy = fresh_copy(template, parent / "run"), fresh_copy(template, tmp_path / "c" / "run")
    for root in (run, copy):
        damage(root, target, kind, b"\x00\xff{[junk")
    probe(run, copy, parent)
