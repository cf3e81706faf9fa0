"""Does memory stay bounded over a long run? Runs `rl` on the tiny model for many steps
(default 500, CPU) and prints the resident memory (`rss_mib`, in every metrics.jsonl record)
of the orchestrator and the trainer after warm-up and at the end.

    python benchmarks/soak.py [--steps 500] [--warmup 50] [--out outputs/soak]

Bar (issue "reliability"): each grows by less than 10% from the warm-up window to the end.
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402
from rlcore.reporting.metrics import is_training_step, read_records  # noqa: E402
from rlcore.runs.rundir import RunDir  # noqa: E402

WINDOW = 20
COMPONENTS = ("orchestrator", "trainer")


def soak_toml(model_dir: Path, out: Path, steps: int, port: int) -> str:
    """A CPU run of the tiny model on one-digit addition, checkpointing every 100 steps."""
    return f"""max_steps = {steps}
seq_len = 256
output_dir = "{out}"
async_level = 1
[model]
name = "{model_dir}"
[ckpt]
interval = 100
keep = 1
[trainer.model]
dtype = "float32"
[inference.model]
dtype = "float32"
[trainer.optim]
lr = 1e-4
[orchestrator]
batch_size = 8
rollouts_per_example = 4
[orchestrator.sampling]
max_tokens = 8
[[orchestrator.env]]
id = "rl-add-digits"
[inference.server]
port = {port}
[inference.cpu]
kvcache_space_gib = 1
"""


def rss_growth(run: RunDir, warmup: int) -> dict[str, dict[str, float]]:
    """Per component: median rss_mib over WINDOW steps from `warmup`, over the last WINDOW
    steps, and the growth between them in percent."""
    records, _ = read_records(run.metrics)
    result = {}
    for component in COMPONENTS:
        by_step = {
            int(r["step"]): float(r["rss_mib"])
            for r in records
            if r.get("component") == component
            and "rss_mib" in r
            and (component != "orchestrator" or is_training_step(r))
        }
        steps = sorted(s for s in by_step if s >= warmup)
        if len(steps) < 2 * WINDOW:
            raise SystemExit(f"{component}: only {len(steps)} steps after warm-up in {run.metrics}")
        start = statistics.median(by_step[s] for s in steps[:WINDOW])
        end = statistics.median(by_step[s] for s in steps[-WINDOW:])
        result[component] = {
            "warmup_mib": start,
            "end_mib": end,
            "growth_pct": 100 * (end - start) / start,
            "steps": len(steps),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--out", default="outputs/soak")
    parser.add_argument("--port", type=int, default=8431)
    args = parser.parse_args()
    from tests.tiny_model import cached_tiny_model

    out = REPO / args.out
    out.mkdir(parents=True, exist_ok=True)
    config = out.parent / f"{out.name}.toml"
    config.write_text(soak_toml(cached_tiny_model(seed=0), out, args.steps, args.port))
    started = time.perf_counter()
    argv = rl_argv("@", str(config), "--clean")
    code = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
    wall_s = time.perf_counter() - started
    growth = rss_growth(RunDir(out), args.warmup)
    print(f"exit {code} | {args.steps} steps in {wall_s:.0f} s")
    for component, g in growth.items():
        print(
            f"{component}: rss {g['warmup_mib']:.0f} MiB after step {args.warmup} -> "
            f"{g['end_mib']:.0f} MiB at the end ({g['growth_pct']:+.1f}%)"
        )
    save("soak", {"exit_code": code, "wall_s": wall_s, "steps": args.steps, **growth})


if __name__ == "__main__":
    main()
