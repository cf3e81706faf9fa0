"""Reproducible runs: the quick start N times with `--deterministic --seed S`, compared step by
step (reward, the batch's token and logprob digests, loss and mismatch_kl in metrics.jsonl, bit
for bit) and by the hash of the final checkpoint's model and optimizer state; one run with
another seed must differ; optionally M runs of the default mode beside them for the cost (wall
time) and the spread of the last-5 reward. Runs one after another on this machine; extra
arguments go to every `rl` call.

    python -m benchmarks.determinism                              # 5 runs of the quick start
    python -m benchmarks.determinism --runs 3 --max-steps 10 --default-runs 2   # smaller
"""

import argparse
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402
from benchmarks.launcher_overhead import QUICKSTART  # noqa: E402

COMPARED = {
    "orchestrator": ("reward", "tokens_digest", "logprobs_digest"),
    "trainer": ("loss", "mismatch_kl"),
}


def run_once(work: Path, name: str, seed: int, deterministic: bool, args, extra) -> dict:
    """One quick start run: wall time, per-step figures, final state hash."""
    out, log = work / name, work / f"{name}.log"
    argv = rl_argv(*QUICKSTART, "--seed", str(seed), "--output-dir", str(out), "--clean")
    argv += ["--deterministic"] if deterministic else []
    argv += ["--max-steps", str(args.max_steps)] if args.max_steps else []
    started = time.perf_counter()
    with log.open("w") as sink:
        code = subprocess.run(
            argv + extra, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT
        ).returncode
    wall_s = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name} exited with {code}; see {log}")
    steps = per_step(out / "metrics.jsonl")
    result = {"name": name, "seed": seed, "deterministic": deterministic, "wall_s": wall_s}
    result |= {"steps": steps, "state_hash": state_hash(out)}
    rewards = [
        steps[str(s)]["reward"] for s in sorted(map(int, steps)) if "reward" in steps[str(s)]
    ]
    result["last5_reward"] = statistics.fmean(rewards[-5:])
    if not args.keep_runs:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)  # 1.7 GB each
    print(
        f"{name}: {wall_s:.0f} s, last-5 reward {result['last5_reward']:.3f}, "
        f"state {result['state_hash'][:12]}",
        flush=True,
    )
    return result


def per_step(metrics: Path) -> dict[str, dict[str, float]]:
    """step -> the compared figures (orchestrator batch n's reward is at step n, the trainer's
    step n + 1 trains on it: both are keyed by the batch)."""
    steps: dict[str, dict[str, float]] = {}
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        keys = COMPARED.get(record["component"], ())
        if record["component"] == "orchestrator" and "reward" not in record:
            continue  # an eval record
        batch = record["step"] - (record["component"] == "trainer")
        for key in keys:
            steps.setdefault(str(batch), {})[key] = record.get(key)
    return steps


def state_hash(out: Path) -> str:
    """SHA-256 of the last checkpoint's trainer data (model and AdamW state, fp32)."""
    last = max((out / "checkpoints").glob("step_*"), key=lambda p: int(p.name[5:]))
    digest = hashlib.sha256()
    for file in sorted((last / "trainer").rglob("*.distcp")):
        digest.update(file.read_bytes())
    return digest.hexdigest()


def equal_steps(runs: list[dict]) -> tuple[int, int, list[str]]:
    """(steps where every run has the same figures bit for bit, steps, first differences)."""
    steps = sorted(set().union(*(r["steps"] for r in runs)), key=int)
    same, diffs = 0, []
    for step in steps:
        values = [json.dumps(r["steps"].get(step), sort_keys=True) for r in runs]
        if len(set(values)) == 1:
            same += 1
        elif len(diffs) < 3:
            diffs.append(f"step {step}: " + " | ".join(values))
    return same, len(steps), diffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="deterministic runs with --seed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--other-seed", type=int, default=1, help="one more run; -1: none")
    parser.add_argument("--default-runs", type=int, default=0, help="runs without the switch")
    parser.add_argument("--max-steps", type=int, default=None, help="fewer than the 25 steps")
    parser.add_argument("--work", default=None, help="keep the runs' folders and logs here")
    parser.add_argument("--keep-runs", action="store_true", help="keep the checkpoints too")
    parser.add_argument("--save-as", default="determinism", help="benchmarks/results/NAME.json")
    args, extra = parser.parse_known_args()
    steps_note = f"{args.max_steps} steps" if args.max_steps else "25 steps (as shipped)"
    print(f"the quick start, {steps_note}, {args.runs} deterministic runs with seed {args.seed}")
    with tempfile.TemporaryDirectory(prefix="determinism_") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        det, default, other = [], [], []
        for i in range(max(args.runs, args.default_runs)):  # interleaved: the same load
            if i < args.runs:
                det.append(run_once(work, f"det{i}", args.seed, True, args, extra))
            if i < args.default_runs:
                default.append(run_once(work, f"default{i}", args.seed, False, args, extra))
        if args.other_seed >= 0:
            other = [run_once(work, "other_seed", args.other_seed, True, args, extra)]
    report(args, det, other, default, steps_note)


def report(args, det: list[dict], other: list[dict], default: list[dict], steps_note: str):
    same, num_steps, diffs = equal_steps(det)
    hashes = {r["state_hash"] for r in det}
    print(
        f"\n== {len(det)} runs of the quick start ({steps_note}), --deterministic --seed "
        f"{args.seed} =="
    )
    print(
        f"steps with bitwise-equal reward, batch digests, loss and mismatch_kl in every run: "
        f"{same}/{num_steps}"
    )
    print(*diffs, sep="\n") if diffs else None
    print(f"final model+optimizer state: {len(hashes)} distinct hash(es) {sorted(hashes)}")
    if other:
        o_same, _, _ = equal_steps([det[0], other[0]])
        same_state = "the same" if other[0]["state_hash"] in hashes else "different"
        print(
            f"seed {args.other_seed}: equal to seed {args.seed} at {o_same}/{num_steps} steps, "
            f"state hash {same_state}"
        )
    det_wall = statistics.median(r["wall_s"] for r in det)
    print(f"wall time deterministic: median {det_wall:.0f} s ({[round(r['wall_s']) for r in det]})")
    results = {"steps": steps_note, "deterministic": det, "other_seed": other, "default": default}
    if default:
        def_wall = statistics.median(r["wall_s"] for r in default)
        last5 = [r["last5_reward"] for r in default]
        d_same, _, _ = equal_steps(default) if len(default) > 1 else (0, 0, [])
        walls = [round(r["wall_s"]) for r in default]
        print(
            f"wall time default: median {def_wall:.0f} s ({walls}); deterministic / default "
            f"= {det_wall / def_wall:.2f}"
        )
        spread = max(last5) - min(last5)
        print(
            f"default mode last-5 reward over {len(default)} runs: "
            f"{[round(x, 3) for x in last5]} (spread {spread:.3f}); bitwise-equal steps "
            f"{d_same}/{num_steps}"
        )
        results["ratio"] = det_wall / def_wall
    print(f"deterministic last-5 reward: {[round(r['last5_reward'], 3) for r in det]}")
    save(args.save_as, results)


if __name__ == "__main__":
    main()
