"""`rl view` on a large run: each page's first load on a cold server, against the 1 s limit.

    .venv/bin/python -m benchmarks.view_pages                      # 10,000 steps, 1 GB archive
    .venv/bin/python -m benchmarks.view_pages --size-gb 0.1 --steps 2000 --dir /tmp/big

Writes (once; kept when `--dir` is given and already holds it) a run of `--steps` steps: a
metrics.jsonl with an orchestrator and a trainer record per step, configs, logs, a checkpoint
every 500 steps, in-run evaluations every 500 steps, and a rollout archive of `--size-gb` in
`samples/step_<n>.parquet` (64 rollouts a step: 8 groups of 8, the tokens per rollout chosen so
the files add up to the size asked), plus a second run of the same length to compare with.
Then for each page it starts a fresh `rl view` (nothing cached in the server; the files are in
the OS's page cache, as on a machine that just wrote them), times the first GET of the page and
a second one, and prints both against the limit.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import print_table, save  # noqa: E402

LIMIT_S = 1.0
ROLLOUTS = 64
GROUP = 8


def archive_table(step: int, tokens: int, seed: int = 0):
    """One step's archive: ROLLOUTS rows of `tokens` random tokens (words from a large
    vocabulary and random logprobs: text that compresses about as real text does)."""
    import json

    import numpy as np
    import pyarrow as pa

    from rlcore.contracts import samples_store

    rng = np.random.default_rng(seed + step)
    vocab = np.array([f"w{i}" for i in range(20_000)])
    texts = [(vocab[rng.integers(0, len(vocab), tokens)] + " ").tolist() for _ in range(ROLLOUTS)]
    groups = [i // GROUP for i in range(ROLLOUTS)]
    prompts = [
        json.dumps([{"role": "user", "content": f"task {g} of step {step}"}]) for g in groups
    ]
    columns = {
        "step": [step] * ROLLOUTS,
        "policy_step": [max(0, step - 1)] * ROLLOUTS,
        "env": ["rl-add-digits"] * ROLLOUTS,
        "group": groups,
        "member": [i % GROUP for i in range(ROLLOUTS)],
        "example_id": [step * 100 + g for g in groups],
        "prompt": prompts,
        "completion": [json.dumps([{"role": "assistant", "content": "".join(t)}]) for t in texts],
        "reward": rng.random(ROLLOUTS).tolist(),
        "reward_parts": [json.dumps({"correct": 1.0})] * ROLLOUTS,
        "advantage": rng.standard_normal(ROLLOUTS).tolist(),
        "kept": [True] * ROLLOUTS,
        "num_prompt_tokens": [30] * ROLLOUTS,
        "num_completion_tokens": [tokens] * ROLLOUTS,
        "is_truncated": [False] * ROLLOUTS,
        "error": [None] * ROLLOUTS,
        "token_text": texts,
        "token_logprob": [(-rng.random(tokens) * 3).astype("float32").tolist() for _ in texts],
        "token_mask": [[True] * tokens for _ in texts],
    }
    return pa.table(columns, schema=samples_store.schema())


def tokens_for(bytes_per_step: float, probe_dir: Path) -> int:
    """Tokens per rollout that make one step's file about `bytes_per_step`."""
    from tests.view_runs import write_step

    sizes = {}
    for tokens in (50, 400):
        sizes[tokens] = (
            write_step(probe_dir, 0, archive_table(0, tokens).to_pydict()).stat().st_size
        )
    per_token = (sizes[400] - sizes[50]) / 350
    return max(1, round(50 + (bytes_per_step - sizes[50]) / per_token))


def write_archive(run: Path, steps: int, size_gb: float) -> float:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlcore.contracts import samples_store

    with tempfile.TemporaryDirectory() as probe:
        tokens = tokens_for(size_gb * 1e9 / steps, Path(probe))
    template = archive_table(0, tokens)
    folder = run / "samples"
    folder.mkdir(exist_ok=True)
    total = 0
    for step in range(steps):
        table = template.set_column(0, "step", pa.array([step] * ROLLOUTS, pa.int64()))
        # the writer's table and metadata (samples_store), written without its fsync: faster
        table = table.replace_schema_metadata(samples_store.metadata(step, max(0, step - 1)))
        path = folder / f"step_{step}.parquet"
        pq.write_table(table, path, compression="zstd")
        total += path.stat().st_size
        if step % 1000 == 0:
            print(f"  archive: step {step}/{steps}, {total / 1e9:.2f} GB", flush=True)
    return total / 1e9


def make_big_runs(root: Path, steps: int, size_gb: float) -> tuple[Path, Path, float]:
    from tests.view_runs import make_run, write_eval

    big, other = root / "big", root / "other"
    done = root / ".complete"
    if done.exists():
        return big, other, float(done.read_text())
    print(f"writing a {steps}-step run with a {size_gb} GB archive under {root}", flush=True)
    make_run(big, steps=steps, ckpt_every=500)
    make_run(other, steps=steps, lr=1e-5, ckpt_every=500)
    for step in range(500, steps + 1, 500):
        write_eval(big / "evals", step, examples=20, rollouts=8)
    size = write_archive(big, steps, size_gb)
    done.write_text(f"{size}\n")
    return big, other, size


def first_loads(root: Path, pages: dict[str, list[str]]) -> dict[str, tuple[float, float, int]]:
    """Per page: (first load s, second load s, bytes) on a fresh `rl view`. A load is the page,
    then the JSON it fetches as it opens, all at once as the browser does (the static files,
    the same for every page, are left out: a browser keeps them)."""
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    from tests.integration.view_server import ViewServer

    found = {}
    for name, paths in pages.items():
        with ViewServer(str(root)) as server, httpx.Client(base_url=server.base) as web:
            times, size = [], 0
            for _ in range(2):
                started = time.perf_counter()
                responses = [web.get(paths[0])]
                with ThreadPoolExecutor(max(1, len(paths) - 1)) as pool:
                    responses += list(pool.map(web.get, paths[1:]))
                times.append(time.perf_counter() - started)
                for path, response in zip(paths, responses, strict=True):
                    assert response.status_code == 200, (path, response.status_code)
                    size += len(response.content)
            found[name] = (times[0], times[1], size // 2)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--size-gb", type=float, default=1.0, help="rollout archive size")
    parser.add_argument("--dir", type=Path, help="where to write the runs (kept; default: temp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        root = args.dir or Path(temp)
        root.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        big, other, size = make_big_runs(root, args.steps, args.size_gb)
        print(f"runs ready in {time.perf_counter() - started:.0f} s ({size:.2f} GB archive)")
        from launcher.view.library import run_id

        a, b = run_id(big.resolve()), run_id(other.resolve())
        middle = args.steps // 2
        curves = [f"/api/run/{a}/curves"]
        pages = {
            "runs list": ["/"],
            "run page (+ its curves JSON)": [f"/run/{a}", *curves],
            "rollouts (last step)": [f"/run/{a}/rollouts"],
            f"rollouts (step {middle}, tokens shaded)": [
                f"/run/{a}/rollouts?step={middle}&tokens=1"
            ],
            "evals (+ a step's samples)": [f"/run/{a}/evals"],
            "compare (+ both runs' curves JSON)": [
                f"/compare?runs={a},{b}",
                *curves,
                f"/api/run/{b}/curves",
            ],
        }
        loads = first_loads(root, pages)
    rows = [
        (
            name,
            f"{first:.3f} s",
            f"limit {LIMIT_S:.1f} s; again {again:.3f} s, "
            f"{size_b / 1024:.0f} KiB {'OK' if first <= LIMIT_S else 'OVER'}",
        )
        for name, (first, again, size_b) in loads.items()
    ]
    print_table(f"rl view, first load on a cold server ({args.steps} steps, {size:.2f} GB)", rows)
    firsts = [first for first, _, _ in loads.values()]
    print(f"\nslowest first load {max(firsts):.3f} s (median {statistics.median(firsts):.3f} s)")
    save("view_pages", {"steps": args.steps, "archive_gb": size, "loads": loads})


if __name__ == "__main__":
    main()
