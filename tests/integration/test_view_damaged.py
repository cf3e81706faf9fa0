"""`rl view` as a user runs it, on run folders that are damaged, forged or huge (issue #60): every
page of every run answers within 10 s with a page or a JSON error (no traceback in the server's
output), the server's memory stays under 500 MB throughout (sampled every 20 ms), and while 50
slow pages are being read the runs list still answers within 2 s."""

import json
import os
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from launcher.view.library import run_id
from tests.integration.view_server import ViewServer
from tests.view_runs import make_run, sample_rows, write_eval, write_samples, write_step

pytestmark = pytest.mark.integration
MiB = 2**20
PAGE_LIMIT_S = 10.0
MEMORY_LIMIT = 500 * MiB
LIST_LIMIT_S = 2.0


def huge_completions(run: Path, num: int, size: int) -> None:
    rows = sample_rows(0, groups=1, members=num)
    for i in range(num):
        rows["completion"][i] = json.dumps([{"role": "assistant", "content": "x" * size}])
    write_step(run, 0, rows)


def sparse(path: Path, size: int = 2**31) -> None:
    path.unlink(missing_ok=True)
    with path.open("wb") as f:
        f.truncate(size)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """One healthy run and one of each damage the red team found."""
    root = tmp_path_factory.mktemp("damaged") / "outputs"
    healthy = make_run(root / "healthy")
    write_samples(healthy, range(2))
    write_eval(healthy / "evals", 2)
    huge_completions(make_run(root / "huge-completions"), num=4, size=64 * MiB)
    write_samples(make_run(root / "long-tokens"), range(1), groups=1, members=8, tokens=300_000)
    sparse(make_run(root / "huge-metrics") / "metrics.jsonl", 2**30)
    (make_run(root / "deep-run-json") / "run.json").write_text("[" * 100_000 + "]" * 100_000)
    fifo = make_run(root / "fifo-run-json")
    (fifo / "run.json").unlink()
    os.mkfifo(fifo / "run.json")
    zero = make_run(root / "dev-zero")
    for name in ("run.json", "metrics.jsonl"):
        (zero / name).unlink()
        (zero / name).symlink_to("/dev/zero")
    odd = make_run(Path(os.fsdecode(os.fsencode(root) + b"/not-utf8-\xff")) / "run")
    write_samples(odd, range(1))
    nan = make_run(root / "nan")
    rows = sample_rows(0)
    rows["reward"][0] = float("nan")
    write_step(nan, 0, rows)
    evals = write_eval(nan / "evals", 2)
    with (evals / "results.jsonl").open("a") as f:
        f.write('{"env": "e", "completion": "\\ud800", "reward": NaN}\n')
    for name in ("configs/trainer.toml", "logs/trainer.log", "evals/step_2/summary.json"):
        run = make_run(root / f"sparse-{name.replace('/', '-')}")
        write_eval(run / "evals", 2)
        sparse(run / name)
    return root


def pages(rid: str) -> list[str]:
    return [
        f"/run/{rid}",
        f"/api/run/{rid}/curves",
        f"/api/run/{rid}/logs",
        f"/run/{rid}/rollouts",
        f"/run/{rid}/rollouts?step=0&tokens=1",
        f"/api/run/{rid}/rollouts?step=0",
        f"/run/{rid}/evals",
        f"/api/run/{rid}/evals?step=2",
        f"/api/run/{rid}/text?step=0&row=0&part=completion&start=1000000",
    ]


def rest_of_output(server: ViewServer) -> str:
    server.stop()
    return server.output + server.proc.stdout.read().decode(errors="replace")


class PeakMemory(threading.Thread):
    """The largest resident size of a process, sampled every 20 ms until `stop`."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.process, self.peak, self.done = psutil.Process(pid), 0, threading.Event()

    def run(self):
        while not self.done.wait(0.02):
            try:
                self.peak = max(self.peak, self.process.memory_info().rss)
            except psutil.Error:
                return

    def stop(self) -> int:
        self.done.set()
        self.join()
        return self.peak


def test_every_page_of_every_damaged_run_answers_in_time_and_memory(tree):
    server = ViewServer(str(tree))
    memory = PeakMemory(server.proc.pid)
    memory.start()
    slowest = (0.0, "")
    try:
        with httpx.Client(base_url=server.base, timeout=PAGE_LIMIT_S + 5) as web:
            runs = web.get("/api/runs").json()
            assert {r["name"] for r in runs} >= {"healthy", "huge-completions", "deep-run-json"}
            urls = ["/", "/api/runs", *(u for r in runs for u in pages(r["id"]))]
            for url in urls:
                started = time.monotonic()
                response = web.get(url)
                took = time.monotonic() - started
                slowest = max(slowest, (took, url))
                assert response.status_code < 500, (url, response.text[:300])
                assert took < PAGE_LIMIT_S, (url, took)
                assert len(response.content) < 20 * MiB, (url, len(response.content))
    finally:
        peak = memory.stop()
        output = rest_of_output(server)
    assert "Traceback" not in output, output[-3000:]
    print(f"slowest page {slowest[1]}: {slowest[0]:.2f} s; peak memory {peak / MiB:.0f} MiB")
    assert peak < MEMORY_LIMIT, f"a view server peaked at {peak / MiB:.0f} MiB"


def seconds_to_list(web: httpx.Client) -> float:
    """How long the runs list takes to answer (a measurement, not a wait: no deadline)."""
    started = time.monotonic()
    assert web.get("/api/runs").status_code == 200
    return time.monotonic() - started


def test_the_runs_list_answers_while_50_slow_pages_are_read(tree):
    rid = run_id((tree / "huge-completions").resolve())
    with ViewServer(str(tree)) as server:
        with httpx.Client(base_url=server.base, timeout=120) as web:
            web.get("/api/runs")

            def slow_page(index: int):
                with httpx.Client(base_url=server.base, timeout=300) as own:
                    own.get(f"/run/{rid}/rollouts?step=0&page_index={index}")

            threads = [threading.Thread(target=slow_page, args=(i,)) for i in range(50)]
            for thread in threads:
                thread.start()
            time.sleep(1.0)
            took = []
            for _ in range(3):
                took.append(seconds_to_list(web))
                time.sleep(0.5)
            for thread in threads:
                thread.join()
    print(f"runs list under 50 slow pages: {', '.join(f'{t:.3f}' for t in took)} s")
    assert max(took) < LIST_LIMIT_S, took
