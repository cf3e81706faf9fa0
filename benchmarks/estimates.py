"""The pre-launch estimate against what runs measure: for each job, the estimated and measured
wall time, peak memory per process (PSS of each process tree, sampled by `rl`) and disk at the
end, with their ratio (measured / estimated); and the time left printed once a quarter of the
steps is done, against when the run really ended. Jobs: the quick start, 64- and 256-token
answers, 128 rollouts, LoRA, a multi-turn environment (`rl-guess-number`) and `rl sft`.

    python -m benchmarks.estimates                     # all jobs, this machine
    python -m benchmarks.estimates --avx2              # the same under rlcore.host.machine.AVX2_ENV
    python -m benchmarks.estimates --jobs quickstart lora --steps-scale 0.5

Each run's own run.json holds the estimate and the measured totals (launcher/eta.py); this
script reads them back and adds the ETA check from the progress lines' `left ~...` words.
Results: benchmarks/results/estimates[-avx2].json; the table goes in benchmarks/README.md."""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402

QUICKSTART = [
    "--trainer",
    "@",
    "configs/quickstart/train.toml",
    "--orchestrator",
    "@",
    "configs/quickstart/orch.toml",
    "--inference",
    "@",
    "configs/quickstart/infer.toml",
]
GUESS_NUMBER = '[[env]]\nid = "rl-guess-number"\n'
SFT_EXAMPLE = "examples/sft_then_rl"
JOBS = {
    "quickstart": (QUICKSTART, 8),
    "answers-64": (
        [
            *QUICKSTART,
            "--orchestrator.sampling.max-tokens",
            "64",
            "--inference.cpu.kvcache-space-gib",
            "0.375",
        ],
        4,
    ),
    "answers-256": (
        [
            *QUICKSTART,
            "--orchestrator.sampling.max-tokens",
            "256",
            "--inference.cpu.kvcache-space-gib",
            "1",
        ],
        4,
    ),
    "rollouts-128": (
        [
            *QUICKSTART,
            "--orchestrator.batch-size",
            "128",
            "--inference.cpu.kvcache-space-gib",
            "0.375",
        ],
        4,
    ),
    "lora": (["@", "configs/lora/rl.toml"], 4),
    "multi-turn": ([*QUICKSTART, "--orchestrator", "@", "{work}/guess_number.toml"], 4),
    "rl-sft": (["sft", "@", f"{SFT_EXAMPLE}/sft.toml"], 6),
}
"""name: (rl arguments, steps): short, so that the set runs in well under an hour on a busy
2-CPU machine; the quick start's 8 steps give the time left after a quarter a measured pace."""
LEFT = re.compile(r"^\[[#-]+\] (\d+)/(\d+) .*\| left ~(.+)$")
UNITS = {"h": 3600, "min": 60, "s": 1}


def seconds(words: str) -> float:
    """`4 min 10 s` -> 250 (launcher/eta.py's duration words)."""
    parts = words.split()
    return sum(float(n) * UNITS[u] for n, u in zip(parts[::2], parts[1::2], strict=True))


def run_job(name: str, argv: list[str], steps: int, work: Path, env: dict) -> dict:
    """Run one job to its end; its run.json figures and the ETA after a quarter."""
    out = work / name
    command = rl_argv(*argv, "--max-steps", str(steps), "--output-dir", str(out), "--clean")
    log = (work / f"{name}.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lefts: list[tuple[int, float, float]] = []  # (steps done, seconds since start, left)

    def read() -> None:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            match = LEFT.match(line.strip())
            if match:
                lefts.append((int(match[1]), time.monotonic() - started, seconds(match[3])))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    reader.join(timeout=10)
    total = time.monotonic() - started
    state = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    result = {
        "exit_code": code,
        "wall_s": round(total, 1),
        "steps": steps,
        "estimate": state.get("estimate"),
        "measured": state.get("measured"),
        "load": os.getloadavg(),
    }
    quarter = math.ceil(steps / 4)
    after = next((x for x in lefts if x[0] >= quarter), None)
    if after is not None:
        done, at, left = after
        result["eta_quarter"] = {
            "steps_done": done,
            "at_s": round(at, 1),
            "left_s": left,
            "predicted_end_s": round(at + left, 1),
            "error": round((at + left) / total - 1, 3),
        }
    return result


def ratios(result: dict) -> dict:
    """measured / estimated per figure (the whole command's wall time against the estimate)."""
    estimate, measured = result.get("estimate") or {}, result.get("measured") or {}
    found = {}
    if estimate.get("wall_s"):
        found["wall"] = result["wall_s"] / estimate["wall_s"]
    for name, value in (estimate.get("memory_bytes") or {}).items():
        got = (measured.get("peak_memory_bytes") or {}).get(name)
        if value and got:
            found[f"mem {name}"] = got / value
    disk = sum((estimate.get("disk_bytes") or {}).values())
    if disk and measured.get("disk_bytes"):
        found["disk"] = measured["disk_bytes"] / disk
    return {k: round(v, 2) for k, v in found.items()}


def table(results: dict) -> str:
    """Markdown rows: job, wall est/meas, memory per process est/meas, disk est/meas, ratios,
    ETA after a quarter."""
    gib = 2**30
    rows = [
        "| job | wall est / meas | trainer GiB | inference GiB | orchestrator GiB | "
        "disk GiB | ratios (meas / est) | ETA after 1/4 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        estimate, measured = result.get("estimate") or {}, result.get("measured") or {}
        mem_e, mem_m = estimate.get("memory_bytes") or {}, measured.get("peak_memory_bytes") or {}

        def pair(key: str, mem_e=mem_e, mem_m=mem_m) -> str:
            if key not in mem_e:
                return "-"
            return f"{mem_e[key] / gib:.2f} / {mem_m.get(key, 0) / gib:.2f}"

        disk_e = sum((estimate.get("disk_bytes") or {}).values()) / gib
        disk_m = (measured.get("disk_bytes") or 0) / gib
        eta = result.get("eta_quarter")
        eta_words = f"{eta['error']:+.0%}" if eta else "-"
        ratio_words = ", ".join(f"{k} {v}" for k, v in ratios(result).items())
        rows.append(
            f"| {name} | {estimate.get('wall_s', 0):.0f} / {result['wall_s']:.0f} s | "
            f"{pair('trainer')} | {pair('inference')} | {pair('orchestrator')} | "
            f"{disk_e:.2f} / {disk_m:.2f} | {ratio_words} | {eta_words} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--avx2", action="store_true", help="run under AVX2_ENV (an AVX2 cap)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="scale every job's steps")
    parser.add_argument("--work", default="outputs/estimates-bench", help="runs and logs here")
    args = parser.parse_args()
    from rlcore.host.machine import AVX2_ENV

    work = (REPO / args.work / ("avx2" if args.avx2 else "native")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    (work / "guess_number.toml").write_text(GUESS_NUMBER)
    if "rl-sft" in args.jobs and not (REPO / SFT_EXAMPLE / "data" / "train.jsonl").exists():
        subprocess.run([sys.executable, f"{SFT_EXAMPLE}/make_data.py"], cwd=REPO, check=True)
    env = {**os.environ, **(AVX2_ENV if args.avx2 else {})}
    results = {}
    for name in args.jobs:
        argv, steps = JOBS[name]
        argv = [a.replace("{work}", str(work)) for a in argv]
        steps = max(4, round(steps * args.steps_scale))
        print(f"{name}: {steps} steps ...", flush=True)
        results[name] = run_job(name, argv, steps, work, env)
        print(f"{name}: {ratios(results[name])} eta {results[name].get('eta_quarter')}", flush=True)
    print("\n" + table(results))
    save("estimates-avx2" if args.avx2 else "estimates", {"jobs": results})


if __name__ == "__main__":
    main()
