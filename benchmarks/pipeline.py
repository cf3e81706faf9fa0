"""Pipeline efficiency of the CPU default run for async_level 0, 1 and 2.

For each level, runs `rl` on the quick-start configs for `--steps` steps, then reads
metrics.jsonl: per-step generation, waiting for and loading weights (the load alone is in
weights_and_checkpoints.py), training, weight publish and checkpoint save, the steady-state
step time (trainer steps after the first), and the overlap max(generation, training) / step
time. With async on, step time should approach the larger of generation and training rather
than their sum (on 2 shared CPU cores the two also compete for the same cores).

    python benchmarks/pipeline.py [--steps 8] [--levels 0,1,2] [extra rl flags...]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, print_table, rl_argv, save  # noqa: E402
from benchmarks.launcher_overhead import QUICKSTART  # noqa: E402


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def read_metrics(path: Path) -> dict[str, list[dict]]:
    records: dict[str, list[dict]] = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        records.setdefault(record["component"], []).append(record)
    return records


def summarize(records: dict[str, list[dict]]) -> dict[str, float]:
    orch = [r for r in records.get("orchestrator", []) if "time/generate_s" in r][1:]
    train = [r for r in records.get("trainer", []) if "step_time_s" in r]
    steady = train[1:]
    times = [r["time"] for r in train]
    step_s = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
    out = {
        "generate_s": mean([r["time/generate_s"] for r in orch]),
        "wait_weights_s": mean([r["time/wait_weights_s"] for r in orch]),
        "train_s": mean([r["step_time_s"] for r in steady]),
        "trainer_data_wait_s": mean([r["data_wait_s"] for r in steady]),
        "publish_s": mean([r["publish_s"] for r in steady]),
        "ckpt_s": mean([r["ckpt_s"] for r in train if "ckpt_s" in r]),
        "step_s": step_s,
    }
    out["overlap"] = max(out["generate_s"], out["train_s"]) / step_s
    return out


def run_level(level: int, steps: int, extra: list[str]) -> dict[str, float]:
    out = Path(tempfile.mkdtemp(prefix=f"rl-pipeline-{level}-"))
    argv = rl_argv(
        *QUICKSTART,
        *("--output-dir", str(out), "--max-steps", str(steps), "--async-level", str(level)),
        *("--ckpt.interval", str(max(1, steps // 2))),
        *extra,
    )
    result = subprocess.run(argv, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"run with async_level={level} failed:\n{result.stdout[-3000:]}{result.stderr}")
    return summarize(read_metrics(out / "metrics.jsonl"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--levels", default="0,1,2")
    args, extra = parser.parse_known_args()
    results = {}
    for level in [int(x) for x in args.levels.split(",")]:
        results[level] = run_level(level, args.steps, extra)
    rows = []
    for level, r in results.items():
        rows += [
            (f"async_level={level}: step time", f"{r['step_s']:.2f} s", "steady state"),
            ("  generation", f"{r['generate_s']:.2f} s", "orchestrator"),
            ("  waiting for + loading weights", f"{r['wait_weights_s']:.2f} s", "orchestrator"),
            ("  training", f"{r['train_s']:.2f} s", "trainer step"),
            ("  trainer waiting for data", f"{r['trainer_data_wait_s']:.2f} s", "trainer"),
            ("  weight publish", f"{r['publish_s']:.2f} s", "trainer save"),
            ("  checkpoint save", f"{r['ckpt_s']:.2f} s", "trainer part"),
            ("  overlap max(gen,train)/step", f"{r['overlap']:.2f}", "1.0 = perfect overlap"),
        ]
    print_table("Pipeline efficiency (CPU default run)", rows)
    save("pipeline", {str(k): v for k, v in results.items()})


if __name__ == "__main__":
    main()
