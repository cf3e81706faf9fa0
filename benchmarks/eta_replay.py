"""The time left, replayed: each recorded run of benchmarks/estimates.py (its trainer steps and
training batches at their records' times, its estimate, its real end) is fed to
`rlcore.forecast.progress.Progress` under several pace policies (`PacePolicy`), and the time
left each would have shown at every progress line (one per batch, as `rl` prints it) is set
against the real end. A policy is chosen on one set of jobs and confirmed on the others, never
on the runs it is judged by.

    python -m benchmarks.eta_replay                                  # results/estimates*.json
    python -m benchmarks.eta_replay FILE.json ... --choose quickstart answers-64 lora
    python -m benchmarks.eta_replay DEV.json --held-out LATER.json      # later runs confirm only

Per policy: the error of the end predicted after the first quarter of the steps (the goal:
within 15%) on each job, and the mean absolute error over every line from a quarter to three
quarters of the run. Prints both sets' figures for every policy; the chosen one is the best mean
absolute quarter error on the choosing set (ties: the mean error over the lines)."""

import argparse
import itertools
import json
import math
import statistics
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS  # noqa: E402
from rlcore.forecast.progress import PACE, PacePolicy, from_estimate  # noqa: E402

CHOOSE = ("quickstart", "answers-64", "lora")
"""The jobs a policy is chosen on by default; the others confirm it."""
BEFORE = PacePolicy(
    trainer_from=2,
    batches_waiting=False,
    estimate_weight=1.0,
    median_from=3,
    warmup_steps=0,
    first_batch_ends_start=False,
)
"""The rule before #62, which also read the estimate's later step for every step."""
AS_ESTIMATED = "committed, but the start as estimated until the first step"
"""The committed policy without `first_batch_ends_start` (the rule before it)."""
SHOWN = ("committed", AS_ESTIMATED, "before (#62)")
"""Policies always shown, in the table and run by run."""


def policies() -> dict[str, PacePolicy]:
    """The grid replayed: the committed policy (`PACE`), the one before it, and the knobs of
    how measured intervals take over. The first step's warm-up is not a knob: the time left at
    the start is the estimate's own wall time (which counts it), so it is kept as `PACE` has it
    (the policy before it left it out)."""
    found = {"committed": PACE}
    found["before (#62)"] = BEFORE
    found[AS_ESTIMATED] = replace(PACE, first_batch_ends_start=False)
    grid = itertools.product((1, 2), (False, True), (0.0, 0.5, 1.0), (2, 3, 4))
    for trainer_from, waiting, weight, median_from in grid:
        policy = PacePolicy(trainer_from, waiting, weight, median_from, PACE.warmup_steps)
        name = (
            f"trainer>={trainer_from} {'waited' if waiting else 'all'} batches, "
            f"estimate x{weight:g} until {median_from}"
        )
        found.setdefault(name, policy)
    return found


def runs(paths: list[Path]) -> dict[str, dict]:
    """`file:job` -> the job's result, for every job with a timeline and an estimate."""
    found = {}
    for path in paths:
        data = json.loads(path.read_text())
        for name, result in (data.get("jobs") or {}).items():
            timeline, estimate = result.get("timeline"), result.get("estimate")
            if timeline and estimate and timeline.get("records") and result.get("exit_code") == 0:
                found[f"{path.stem}:{name}"] = result
    return found


def from_run(folder: Path) -> dict | None:
    """A finished run folder as a recorded job: its estimate and measured wall time from
    run.json (the clock's start: its last update less the measured wall time), its records'
    times from metrics.jsonl; None where it lacks any of them."""
    if not (folder / "run.json").is_file():
        print(f"eta_replay: {folder} is not a run folder (no run.json); skipped")
        return None
    state = json.loads((folder / "run.json").read_text())
    measured, estimate = state.get("measured") or {}, state.get("estimate")
    steps = (state.get("progress") or {}).get("max_steps")
    if not (estimate and measured.get("wall_s") and steps and state.get("updated")):
        return None
    start = state["updated"] - measured["wall_s"]
    records = []
    for line in (folder / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if isinstance(record.get("time"), int | float) and "step" in record:
            records.append({**record, "time": record["time"] - start})
    return {
        "exit_code": 0 if state.get("status") == "finished" else 1,
        "steps": steps,
        "estimate": estimate,
        "timeline": {"end_s": measured["wall_s"], "records": records},
    }


def replay(result: dict, policy: PacePolicy) -> list[tuple[int, float, float]]:
    """(batches done, seconds since start, the end it predicts) at each progress line."""
    estimate, timeline = result["estimate"], result["timeline"]
    progress = from_estimate(estimate, result["steps"], start=0.0)
    progress.policy = policy
    if policy == BEFORE or "warmup_s" not in estimate:  # as it was: the later step throughout
        progress.estimated_step_s = estimate["step_s"]
        progress.estimated_warmup_s = None
        progress.estimated_start_s = estimate["start_s"] - estimate["step_s"]
    lines = []
    for record in sorted(timeline["records"], key=lambda r: r["time"]):
        when, step = record["time"], record["step"]
        if record["component"] in ("trainer", "sft") and step > 0:
            progress.step_done(step, when)
        elif record["component"] == "orchestrator" and "reward" in record:
            progress.batch_done(step + 1, when)
            left = progress.left_s(when)
            if left is not None:
                lines.append((min(step + 1, result["steps"]), when, when + left))
    return lines


def errors(result: dict, policy: PacePolicy) -> tuple[float | None, float | None]:
    """(the error after a quarter of the steps, the mean absolute error from a quarter to three
    quarters), as fractions of the real end."""
    end, steps = result["timeline"]["end_s"], result["steps"]
    lines = replay(result, policy)
    quarter = next((p for d, _, p in lines if d >= math.ceil(steps / 4)), None)
    middle = [abs(p / end - 1) for d, _, p in lines if steps / 4 <= d <= 3 * steps / 4]
    return (
        quarter / end - 1 if quarter is not None else None,
        statistics.mean(middle) if middle else None,
    )


def score(found: dict[str, dict], names: list[str], policy: PacePolicy) -> dict:
    """The policy's figures on the runs `names`."""
    quarter, middle = {}, []
    for name in names:
        q, m = errors(found[name], policy)
        if q is not None:
            quarter[name] = q
        if m is not None:
            middle.append(m)
    within = sum(abs(q) <= 0.15 for q in quarter.values())
    return {
        "quarter": quarter,
        "quarter_mae": statistics.mean(abs(q) for q in quarter.values()) if quarter else math.inf,
        "middle_mae": statistics.mean(middle) if middle else math.inf,
        "within_15": f"{within}/{len(quarter)}",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="estimates.py results (default: all)")
    parser.add_argument(
        "--runs", nargs="*", type=Path, default=[], help="finished run folders to replay as well"
    )
    parser.add_argument("--choose", nargs="*", default=list(CHOOSE), help="jobs to choose on")
    parser.add_argument(
        "--held-out",
        nargs="*",
        type=Path,
        default=[],
        help="results files whose runs only confirm (later runs: out of sample in time as well)",
    )
    args = parser.parse_args()
    paths = args.files or ([] if args.runs else sorted(RESULTS.glob("estimates*.json")))
    found = runs(paths)
    later = runs(args.held_out)
    found |= later
    for folder in args.runs:
        result = from_run(folder)
        if result is not None and result["exit_code"] == 0:
            found[f"{folder.parent}:{folder.name}"] = result
    if not found:
        raise SystemExit("no recorded timelines: run benchmarks/estimates.py first")
    choose = [n for n in found if n.split(":", 1)[1] in args.choose and n not in later]
    confirm = [n for n in found if n not in choose]
    print(f"choosing on {len(choose)} runs: {', '.join(choose)}")
    print(f"confirming on {len(confirm)} runs: {', '.join(confirm)}\n")
    table = {name: (score(found, choose, p), p) for name, p in policies().items()}
    best = min(table, key=lambda n: (table[n][0]["quarter_mae"], table[n][0]["middle_mae"]))
    rows = sorted(table, key=lambda n: (table[n][0]["quarter_mae"], table[n][0]["middle_mae"]))
    print(
        "| policy | choose: 1/4 MAE, within 15%, lines MAE | confirm: 1/4 MAE, within 15%, "
        "lines MAE |\n|---|---|---|"
    )
    for name in rows[:8] + [n for n in SHOWN if n not in rows[:8]]:
        chosen, policy = table[name]
        confirmed = score(found, confirm, policy)
        print(
            f"| {name}{' (best)' if name == best else ''} | {chosen['quarter_mae']:.0%}, "
            f"{chosen['within_15']}, {chosen['middle_mae']:.0%} | "
            f"{confirmed['quarter_mae']:.0%}, {confirmed['within_15']}, "
            f"{confirmed['middle_mae']:.0%} |"
        )
    print("\nAfter a quarter, per run (predicted end / real end - 1):")
    for name in dict.fromkeys((*SHOWN, best)):
        policy = table[name][1]
        each = score(found, choose + confirm, policy)["quarter"]
        print(f"  {name}: " + ", ".join(f"{k} {v:+.0%}" for k, v in each.items()))
    if replace(table[best][1]) != PACE:
        print(f"\nthe best on the choosing set is not the committed policy: {table[best][1]}")


if __name__ == "__main__":
    main()
