"""The GPU suite's side-by-side table (benchmarks/gpu_suite.sh writes its inputs): per job, our
trainer with its defaults and compiled, the hand-written loop (benchmarks/handwritten_loop.py)
and prime-rl's published figure, the ratios, and the checks of "fast by default".

    python benchmarks/gpu_table.py OUT_DIR [--jobs packed-8x2k,single-16k]

Reads OUT_DIR/ours-<job>.json (defaults), ours-other-<job>.json (the same job with compile set
the other way: `--compile` where the defaults did not compile, `--no-compile` where they did),
hand-<job>.json; writes OUT_DIR/table.json and prints the table in Markdown. The compile's time
is the compiled run's first step less its median step, less the same excess of the eager run
(what the first step costs anyway); it has paid for itself by compile time / (eager step -
compiled step) steps.
"""

import argparse
import json
import math
import sys
from pathlib import Path

PRIME_RL_16K = 11_900.0
"""prime-rl's published trainer figure for Qwen3-0.6B at seq 16k on one H100 (tokens/s)."""
PRIME_RL_JOB = "single-16k"
MIN_SPEEDUP = 1.1
MAX_MEMORY_SHARE = 1 / 3
MIN_OVER_PRIME_RL = 1.5


def ours(path: Path) -> dict:
    """The figures of one trainer_throughput.py run (its one dtype)."""
    figures = next(iter(json.loads(path.read_text())["figures"].values()))
    return figures | {"compiled": bool(figures["speed"]["compile"])}


def job_row(out: Path, job: str) -> dict:
    default, other = ours(out / f"ours-{job}.json"), ours(out / f"ours-other-{job}.json")
    hand = json.loads((out / f"hand-{job}.json").read_text())
    compiled, eager = (default, other) if default["compiled"] else (other, default)
    compile_s = (compiled["warmup_s"] - compiled["step_s"]) - (eager["warmup_s"] - eager["step_s"])
    gain = eager["step_s"] - compiled["step_s"]
    return {
        "job": job,
        "default": default,
        "compiled": compiled,
        "hand": hand,
        "speedup": default["tokens_s"] / hand["tokens_s"],
        "memory_share": default["peak_memory_gib"] / hand["peak_memory_gib"],
        "compile_s": compile_s,
        "eager_step_s": eager["step_s"],
        "payoff_step": math.ceil(max(compile_s, 0.0) / gain) if gain > 0 else None,
    }


def cell(figures: dict) -> str:
    return f"{figures['tokens_s']:,.0f} tok/s, {figures['peak_memory_gib']:.1f} GiB"


def markdown(rows: list[dict]) -> str:
    lines = [
        "| job | ours, default | ours, compiled | hand-written loop | prime-rl's published |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        prime = f"{PRIME_RL_16K:,.0f} tok/s" if row["job"] == PRIME_RL_JOB else "-"
        default = cell(row["default"]) + (" (compiled)" if row["default"]["compiled"] else "")
        lines.append(
            f"| {row['job']} | {default} | {cell(row['compiled'])} | "
            f"{cell(row['hand'])} | {prime} |"
        )
    return "\n".join(lines)


def checks(rows: list[dict]) -> list[tuple[str, bool]]:
    """The issue's done-when checks: (what, passed)."""
    found = []
    for row in rows:
        job = row["job"]
        found.append(
            (
                f"{job}: default {row['speedup']:.2f}x the hand-written loop's tokens/s "
                f"(>= {MIN_SPEEDUP}x)",
                row["speedup"] >= MIN_SPEEDUP,
            )
        )
        found.append(
            (
                f"{job}: default peak memory {row['memory_share']:.2f} of the hand-written "
                f"loop's (<= 1/3)",
                row["memory_share"] <= MAX_MEMORY_SHARE,
            )
        )
        if job == PRIME_RL_JOB:
            ratio = row["default"]["tokens_s"] / PRIME_RL_16K
            found.append(
                (
                    f"{job}: default {ratio:.2f}x prime-rl's {PRIME_RL_16K:,.0f} tok/s "
                    f"(>= {MIN_OVER_PRIME_RL}x)",
                    ratio >= MIN_OVER_PRIME_RL,
                )
            )
    return found


def compile_lines(rows: list[dict]) -> list[str]:
    return [
        f"{row['job']}: compile about {row['compile_s']:.1f} s; compiled step "
        f"{row['compiled']['step_s']:.3f} s against {row['eager_step_s']:.3f} s eager; paid for "
        f"itself by step {row['payoff_step'] or 'never'}"
        for row in rows
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="the suite's output folder")
    parser.add_argument("--jobs", default="packed-8x2k,single-16k", help="comma-separated")
    parser.add_argument(
        "--other-compile",
        action="store_true",
        help="OUT is one run's JSON: print the flag that sets compile the other way",
    )
    args = parser.parse_args(argv)
    if args.other_compile:
        print("--no-compile" if ours(args.out)["compiled"] else "--compile")
        return 0
    missing = [
        str(args.out / f"{kind}-{job}.json")
        for job in args.jobs.split(",")
        for kind in ("ours", "ours-other", "hand")
        if not (args.out / f"{kind}-{job}.json").exists()
    ]
    if missing:
        print(f"gpu_table: missing {', '.join(missing)} (a suite step failed?)", file=sys.stderr)
        return 2
    rows = [job_row(args.out, job) for job in args.jobs.split(",")]
    found = checks(rows)
    print(markdown(rows) + "\n")
    for line in compile_lines(rows):
        print(line)
    for what, passed in found:
        print(f"{'PASS' if passed else 'FAIL'}  {what}")
    summary = {"rows": rows, "checks": [{"check": w, "passed": p} for w, p in found]}
    (args.out / "table.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
