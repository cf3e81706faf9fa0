"""Compare the trainer's loss variants (and orchestrator options) on a shipped example: one run
per variant, printing the mean reward of the first and last 5 steps, the mean share of clipped
and masked tokens per step (the trainer's clip_frac and mask_frac), the largest mismatch_kl, and
for dynamic sampling the groups skipped per step.

    python benchmarks/losses.py [--example quickstart|mcp] [--variants dual_clip,ratio_clip]
                                [--seed 0] [--out outputs/losses] [extra rl flags...]

`--variants` names `trainer.loss.type` values; `name=flag value ...` entries run other setups,
e.g. `dynamic=--orchestrator.dynamic-sampling.enabled true`.
"""

import argparse
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402
from benchmarks.launcher_overhead import QUICKSTART  # noqa: E402
from rlcore.reporting.metrics import is_training_step, read_records  # noqa: E402
from rlcore.runs.rundir import RunDir  # noqa: E402

WINDOW = 5
EXAMPLES = {
    "quickstart": QUICKSTART,
    "mcp": ["@", "examples/mcp_tasks/rl.toml"],
}
VARIANTS = "ratio_clip,dual_clip,ratio_mask,sequence_mask,prob_mask,tis,gspo"


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summarize(run: RunDir) -> dict:
    records, _ = read_records(run.metrics)
    steps = sorted(filter(is_training_step, records), key=lambda r: r["step"])
    trainer = [r for r in records if r.get("component") == "trainer" and "loss" in r]
    rewards = [r["reward"] for r in steps]
    return {
        "rewards": rewards,
        "first_reward": mean(rewards[:WINDOW]),
        "last_reward": mean(rewards[-WINDOW:]),
        "clip_frac": [r.get("clip_frac", 0.0) for r in trainer],
        "mask_frac": [r.get("mask_frac", 0.0) for r in trainer],
        "max_mismatch_kl": max((r["mismatch_kl"] for r in trainer), default=float("nan")),
        "skipped_groups": [r.get("num_skipped_groups", 0) for r in steps],
    }


def variant_flags(variant: str) -> tuple[str, list[str]]:
    if "=" in variant:
        name, flags = variant.split("=", 1)
        return name, shlex.split(flags)
    return variant, ["--trainer.loss.type", variant]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--example", default="quickstart", choices=list(EXAMPLES))
    parser.add_argument("--variants", default=VARIANTS)
    parser.add_argument("--seed", default="0")
    parser.add_argument("--out", default="outputs/losses")
    args, extra = parser.parse_known_args()
    results = {}
    for variant in args.variants.split(";" if "=" in args.variants else ","):
        name, flags = variant_flags(variant)
        out = REPO / args.out / f"{args.example}_{name}_seed{args.seed}"
        argv = rl_argv(
            *EXAMPLES[args.example],
            *flags,
            "--seed",
            args.seed,
            "--output-dir",
            str(out),
            "--clean",
            *extra,
        )
        started = time.perf_counter()
        code = subprocess.run(argv, cwd=REPO, stdout=subprocess.DEVNULL).returncode
        r = summarize(RunDir(out)) | {"exit_code": code, "wall_s": time.perf_counter() - started}
        results[name] = r
        print(
            f"{args.example} {name}: exit {code} | {len(r['rewards'])} steps in "
            f"{r['wall_s']:.0f} s | reward first {WINDOW} {r['first_reward']:.3f} -> last "
            f"{WINDOW} {r['last_reward']:.3f} | clipped {100 * mean(r['clip_frac']):.2f}% | "
            f"masked {100 * mean(r['mask_frac']):.2f}% | max mismatch_kl "
            f"{r['max_mismatch_kl']:.2e} | skipped groups {sum(r['skipped_groups'])}",
            flush=True,
        )
    save(f"losses_{args.example}_seed{args.seed}", results)


if __name__ == "__main__":
    main()
