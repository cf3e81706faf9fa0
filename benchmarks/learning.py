"""Does the quick start learn? Runs the README's main command N times (one seed each) and
prints, per run: the mean reward of the first and last 5 steps, the wall time, the largest
mismatch_kl the trainer logged, and the share of weight elements that differ from the base
model at the end. A learning regression shows up here before anywhere else.

    python benchmarks/learning.py [--seeds 0,1,2] [--out outputs/learning] [extra rl flags...]

Bar (issue "training that learns"): on 2 CPU cores every run finishes within 10 minutes with a
last-5 mean reward >= 0.6, and >= 80% of weight elements moved.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402
from benchmarks.launcher_overhead import QUICKSTART  # noqa: E402
from rlcore.reporting.metrics import is_training_step, read_records  # noqa: E402
from rlcore.runs.rundir import RunDir, steps_in  # noqa: E402

WINDOW = 5


def final_policy(run: RunDir) -> Path:
    """The newest published policy folder; with the collective transport (nothing published
    on disk) the last checkpoint, exported with `rl export`."""
    stable = (
        [s for s in steps_in(run.weights) if run.weights_stable(s)] if run.weights.is_dir() else []
    )
    if stable:
        return run.weight_dir(max(stable))
    out = Path(tempfile.mkdtemp(prefix="learning-final-")) / "policy"
    argv = rl_argv("export", str(run.root), "--out", str(out), "--dtype", "float32")
    subprocess.run(argv, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return out


def changed_fraction(run: RunDir, base: Path) -> float:
    """Share of weight elements in the final policy that differ from `base`."""
    from safetensors.torch import load_file

    final = {}
    for file in final_policy(run).glob("*.safetensors"):
        final |= load_file(str(file))
    start = {}
    for file in base.glob("*.safetensors"):
        start |= load_file(str(file))
    changed = total = 0
    for name, tensor in final.items():
        if name in start:
            before = start[name].to(tensor.dtype)
            changed += int((tensor != before).sum())
            total += tensor.numel()
    return changed / max(total, 1)


def summarize(run: RunDir, wall_s: float, base: Path) -> dict:
    records, _ = read_records(run.metrics)
    steps = sorted(filter(is_training_step, records), key=lambda r: r["step"])
    rewards = [r["reward"] for r in steps]
    trainer = [r for r in records if r.get("component") == "trainer"]
    kls = [r["mismatch_kl"] for r in trainer if "mismatch_kl" in r]
    return {
        "steps": len(rewards),
        "first_reward": statistics.fmean(rewards[:WINDOW]) if rewards else float("nan"),
        "last_reward": statistics.fmean(rewards[-WINDOW:]) if rewards else float("nan"),
        "rewards": rewards,
        "wall_s": wall_s,
        "max_mismatch_kl": max(kls) if kls else float("nan"),
        "changed_fraction": changed_fraction(run, base),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--out", default="outputs/learning")
    args, extra = parser.parse_known_args()
    from rlcore.config.base import DEFAULT_MODEL
    from rlcore.host.models import resolve_model

    base = Path(resolve_model(DEFAULT_MODEL))
    results = {}
    for seed in args.seeds.split(","):
        out = REPO / args.out / f"seed_{seed}"
        argv = rl_argv(*QUICKSTART, "--seed", seed, "--output-dir", str(out), "--clean", *extra)
        started = time.perf_counter()
        code = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
        wall_s = time.perf_counter() - started
        results[seed] = summarize(RunDir(out), wall_s, base) | {"exit_code": code}
        r = results[seed]
        print(
            f"seed {seed}: exit {code} | {r['steps']} steps in {wall_s:.0f} s | reward first "
            f"{WINDOW} {r['first_reward']:.3f} -> last {WINDOW} {r['last_reward']:.3f} | max "
            f"mismatch_kl {r['max_mismatch_kl']:.2e} | weights changed "
            f"{100 * r['changed_fraction']:.1f}%",
            flush=True,
        )
    save("learning", results)


if __name__ == "__main__":
    main()
