"""`vs_trl.py --sweep`: both sides on the same job at several sizes, one after the other on this
machine: rollouts per step (32, 64, 128 at 16 tokens), answer length (`max_tokens` 16, 64, 256
at 32 rollouts) and a multi-turn environment (`rl-guess-number`, two turns of 16 tokens). Per
point: wall time, steady step, peak memory (PSS over all processes), bytes written and last-5
reward with the ratios ours / TRL's, our step breakdown, and our trainer's achieved GFLOP/s on
its linear layers (`benchmarks/matmul_limit.py` measures the limit). TRL's GRPOTrainer (1.16)
continues a rollout only through tool calls (`tools`, `environment_factory`), which need a chat
template with a tool format; SmolLM2-135M-Instruct's has none. At the multi-turn point TRL so
does the closest thing it can, the single-turn job with the same token budget per rollout
(2 x 16 tokens), and the table says so.

    python benchmarks/vs_trl.py --sweep [--steps 15] [--points 32,64t] [--work DIR]
"""

import tempfile
from pathlib import Path

from benchmarks.common import save
from benchmarks.vs_trl_common import Job, print_row, run_ours, run_trl, summary

POINTS = {
    "32": Job("32 rollouts x 16 tokens (the quick start)"),
    "64": Job("64 rollouts x 16 tokens", prompts=8),
    "128": Job("128 rollouts x 16 tokens", prompts=16),
    "64t": Job("32 rollouts x 64 tokens", max_tokens=64),
    "256t": Job("32 rollouts x 256 tokens", max_tokens=256),
    "multi": Job("32 rollouts, 2 turns x 16 tokens (rl-guess-number)", env="rl-guess-number"),
}


def trl_job(job: Job) -> tuple[Job, str | None]:
    """What TRL runs for `job`, and the note when that is not the same job."""
    if job.env == "rl-add-digits":
        return job, None
    closest = Job(job.name, job.prompts, job.group, 2 * job.max_tokens, job.steps)
    note = "TRL: multi-turn only through tool calls, which this model's template lacks; "
    return closest, note + f"it ran the single-turn job with {closest.max_tokens} tokens"


def sweep(args, extra: list[str]) -> None:
    names = args.points.split(",") if args.points else list(POINTS)
    unknown = [n for n in names if n not in POINTS]
    if unknown:
        raise SystemExit(f"--points: unknown {unknown}; choose from {', '.join(POINTS)}")
    results = {}
    for name in names:
        job = Job(**{**POINTS[name].__dict__, "steps": args.steps})
        theirs, note = trl_job(job)
        with tempfile.TemporaryDirectory(prefix="vs_trl_sweep_") as tmp:
            work = Path(args.work) / name if args.work else Path(tmp)
            work.mkdir(parents=True, exist_ok=True)
            seed = int(args.seeds.split(",")[0])
            trl = {} if args.skip_trl else summary(run_trl(seed, work, args.trl_version, theirs))
            ours = {} if args.skip_ours else summary(run_ours(seed, work, extra, job))
        results[name] = {
            "job": job.name,
            "steps": job.steps,
            "ours": ours,
            "trl": trl,
            "note": note,
        }
        print(f"\n=== {job.name}, {job.steps} steps" + (f" ({note})" if note else ""))
        print_row(seed, ours, trl)
        save("vs_trl_sweep", results)  # after every point: a long sweep keeps what it has
    print_table(results)


def print_table(results: dict) -> None:
    print(
        f"\n{'point':<52} {'wall ours/TRL':>14} {'step ours/TRL':>14} {'mem ours/TRL':>13} "
        f"{'reward ours, TRL':>17} {'GFLOP/s':>8}"
    )
    for point in results.values():
        ours, trl = point["ours"], point["trl"]
        ratio = {
            k: ours.get(k, float("nan")) / trl[k] if trl.get(k) else float("nan")
            for k in ("wall_s", "steady_step_s", "peak_gib")
        }
        rate = ours.get("profile", {}).get("rates", {}).get("trainer linear GFLOP/s", float("nan"))
        nan = float("nan")
        rewards = f"{ours.get('last5_reward', nan):.2f}, {trl.get('last5_reward', nan):.2f}"
        print(
            f"{point['job']:<52} {ratio['wall_s']:>14.2f} {ratio['steady_step_s']:>14.2f} "
            f"{ratio['peak_gib']:>13.2f} {rewards:>17} {rate:>8.1f}"
        )
