"""Small helpers shared by the benchmark scripts: timing, tables, JSON output."""

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def time_command(argv: list[str], repeats: int = 5) -> float:
    """Median wall time in seconds of running `argv` to completion."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run(argv, cwd=REPO, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def rl_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "launcher.rl", *args]


def print_table(title: str, rows: list[tuple[str, str, str]]) -> None:
    """Rows of (what, measured, limit or reference)."""
    width = max(len(r[0]) for r in rows)
    print(f"\n{title}\n{'-' * len(title)}")
    print(f"{'measure':<{width}}  {'value':>14}  reference")
    for name, value, ref in rows:
        print(f"{name:<{width}}  {value:>14}  {ref}")


def save(name: str, data: dict) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"\nwrote {path}")
    return path


def swap_weights(server, body: dict) -> dict:
    """POST /update_weights to an InferenceProcess with its admin token; the answer."""
    from rlcore.contracts.protocol import UPDATE_WEIGHTS_ROUTE

    status, answer = server.admin_post(UPDATE_WEIGHTS_ROUTE, body)
    if status != 200:
        raise RuntimeError(f"/update_weights answered {status}: {answer}")
    return answer
