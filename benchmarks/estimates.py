"""The pre-launch estimate against what runs measure: for each job, the estimated and measured
wall time (from the estimate's print to the command's end; the seconds before it are shown
too) and steady step (the median step that waited for a trained policy), peak memory per
process (PSS of each process tree, sampled by `rl`) and disk at the end, with their ratio
(measured / estimated); and the time left printed once a quarter of the steps is done, against
when the run really ended. Jobs: the quick start, 64- and 256-token answers, 128 rollouts,
LoRA, a multi-turn environment (`rl-guess-number`) and `rl sft`; on request `rl eval` of the
tiny model (`evals-tiny`) and of SmolLM2-135M (`evals`).

    python -m benchmarks.estimates                     # all rl jobs, this machine
    python -m benchmarks.estimates --avx2              # the same under rlcore.host.machine.AVX2_ENV
    python -m benchmarks.estimates --jobs quickstart lora --steps-scale 0.5
    python -m benchmarks.estimates --jobs evals-tiny evals
    python -m benchmarks.estimates --extra='--async-level 0' --work outputs/sync

Each run's own run.json holds the estimate and the measured totals (launcher/eta.py); this
script reads them back and adds the ETA check from the progress lines' `left ~...` words, the
load average at each start, whether the estimate took the job's answers as an earlier run
measured them or at their bound (its `basis: answers:` line), and each run's timeline (its
trainer steps and batches at their records' times, for benchmarks/eta_replay.py). An
evaluation's estimate is made here as `evals` makes it, just before it starts. Before each job
it waits (`--settle-s`) for the load average to forget the previous one.
Each job's checkpoints and weights are deleted once its figures are read (`--keep-runs` keeps
them: about 1.6 GiB a job). Results: benchmarks/results/estimates[-avx2].json; the table goes in
benchmarks/README.md."""

import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psutil  # noqa: E402

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
EVAL_JOBS = {
    "evals-tiny": ("tiny", 4, 3, 8),
    "evals": ("HuggingFaceTB/SmolLM2-135M-Instruct", 32, 4, 16),
}
"""name: (model, examples, rollouts per example, max_tokens) of `rl eval` on rl-add-digits with
its own server (1 GiB of KV cache); `tiny` is the tests' tiny model."""
EVALUATED = re.compile(r"^evaluated .* in (\d+) s")
LEFT = re.compile(r"^\[[#-]+\] (\d+)/(\d+) .*\| left ~(.+)$")
UNITS = {"h": 3600, "min": 60, "s": 1}


def seconds(words: str) -> float:
    """`4 min 10 s` -> 250 (launcher/eta.py's duration words)."""
    parts = words.split()
    return sum(float(n) * UNITS[u] for n, u in zip(parts[::2], parts[1::2], strict=True))


def run_job(name: str, argv: list[str], steps: int, work: Path, env: dict) -> dict:
    """Run one job to its end; its run.json figures and the ETA after a quarter. Its wall time
    counts from the estimate's print to the command's end (what the estimate predicts: `rl sft`
    prints it after its data check, which tokenizes the data); `command_s` is the whole."""
    out = work / name
    command = rl_argv(*argv, "--max-steps", str(steps), "--output-dir", str(out), "--clean")
    log = (work / f"{name}.log").open("w")
    load_at_start = os.getloadavg()[0]
    started, started_wall = time.monotonic(), time.time()
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    lefts: list[tuple[int, float, float]] = []  # (steps done, seconds since start, left)
    printed: list[float] = []  # when the estimate's block began, seconds since start

    def read() -> None:
        for line in proc.stdout:
            log.write(line)
            log.flush()
            if line.startswith("Estimate") and not printed:
                printed.append(time.monotonic() - started)
            match = LEFT.match(line.strip())
            if match:
                lefts.append((int(match[1]), time.monotonic() - started, seconds(match[3])))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code = proc.wait()
    reader.join(timeout=10)
    total = time.monotonic() - started
    state = json.loads((out / "run.json").read_text()) if (out / "run.json").exists() else {}
    before = printed[0] if printed else 0.0
    result = {
        "exit_code": code,
        "wall_s": round(total - before, 1),
        "command_s": round(total, 1),
        "before_estimate_s": round(before, 1),
        "steps": steps,
        "estimate": state.get("estimate"),
        "measured": state.get("measured"),
        "steady_step_s": steady_step_s(out),
        "load_at_start": round(load_at_start, 2),
        "load": os.getloadavg(),
        "timeline": timeline(out, started_wall, total, lefts),
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


def drop_weights(out: Path) -> None:
    """Delete the checkpoints and weights of the run this script just made in `out` (its
    figures are read): only in a folder `rl` marked as a run, never through a link."""
    from rlcore.runs.ownership import read_run_id

    if out.is_symlink() or read_run_id(out) is None:
        return
    for folder in (out / "checkpoints", out / "weights"):
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)


def eval_config(name: str, work: Path) -> Path:
    """The eval.toml of the evals job `name` (EVAL_JOBS)."""
    model, examples, rollouts, max_tokens = EVAL_JOBS[name]
    if model == "tiny":
        from tests.tiny_model import cached_tiny_model

        model = str(cached_tiny_model(seed=0))
    path = work / f"{name}.toml"
    path.write_text(
        f'output_dir = "{work / name}"\nseq_len = 256\n[model]\nname = "{model}"\n'
        f"[sampling]\nmax_tokens = {max_tokens}\n"
        f'[[eval.env]]\nid = "rl-add-digits"\nnum_examples = {examples}\n'
        f"rollouts_per_example = {rollouts}\n[inference]\ncpu = {{ kvcache_space_gib = 1 }}\n"
    )
    return path


def sample_peaks(pid: int, peaks: dict[str, int]) -> None:
    """The evaluation's own memory (PSS) now and its server's (its children's trees), kept at
    their peaks."""
    from launcher.eta import tree_memory

    try:
        process = psutil.Process(pid)
        own = process.memory_full_info().pss
        children = [child.pid for child in process.children()]
    except psutil.Error:
        return
    peaks["evals"] = max(peaks["evals"], own)
    peaks["inference"] = max(peaks["inference"], sum(tree_memory(child) for child in children))


def run_eval_job(name: str, work: Path, env: dict) -> dict:
    """Run one evals job to its end: its estimate (made here as `evals` makes it, just before
    it starts), the span `evals` measures (server start to stop: `evaluated ... in N s`), the
    peak memory of the evaluation and of its server's process tree, and the folder's bytes."""
    import tomllib

    from orchestrator.evals.config import EvalsConfig
    from orchestrator.evals.estimate import evals_forecast
    from rlcore.files.disk_use import folder_bytes

    path = eval_config(name, work)
    config = EvalsConfig.model_validate(tomllib.loads(path.read_text()))
    subprocess.run(["rm", "-rf", str(config.output_dir)], check=True)
    forecast, _ = evals_forecast(config, config.model.name)
    load_at_start = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(
        rl_argv("eval", "@", str(path)), cwd=REPO, stdout=subprocess.PIPE, text=True, env=env
    )
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(proc.stdout), daemon=True)
    reader.start()
    peaks = {"evals": 0, "inference": 0}
    while proc.poll() is None:
        sample_peaks(proc.pid, peaks)
        time.sleep(0.5)
    reader.join(timeout=10)
    (work / f"{name}.log").write_text("".join(output))
    span = next((int(m[1]) for line in output if (m := EVALUATED.match(line))), None)
    return {
        "exit_code": proc.returncode,
        "wall_s": span,
        "command_s": round(time.monotonic() - started, 1),
        "estimate": forecast.record() if forecast is not None else None,
        "measured": {
            "wall_s": span,
            "peak_memory_bytes": peaks,
            "disk_bytes": folder_bytes(config.output_dir),
        },
        "load_at_start": round(load_at_start, 2),
        "load": os.getloadavg(),
    }


def settle(limit_s: float) -> None:
    """Wait up to `limit_s` for the 1-minute load average to fall below 1 (a job just ended
    still counts in it for a minute or two)."""
    deadline = time.monotonic() + limit_s
    while os.getloadavg()[0] >= 1.0 and time.monotonic() < deadline:
        time.sleep(5)


def steady_step_s(out: Path) -> float | None:
    """The median seconds of the steps that waited for a trained policy: the orchestrator's
    batches from the third on (async 1: the first two come from the base policy, and with
    LoRA no adapter is served yet), or `rl sft`'s steps after the first."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return None
    records = [json.loads(line) for line in lines if line.strip()]
    times = [
        r["time/step_s"] for r in records if r.get("component") == "orchestrator" and r["step"] >= 2
    ] or [r["step_time_s"] for r in records if r.get("component") == "sft" and r["step"] >= 2]
    return statistics.median(times) if times else None


TIMELINE_KEYS = (
    "time/step_s",
    "time/generate_s",
    "time/wait_weights_s",
    "completion_len",
    "metrics/num_turns",
    "truncated_fraction",
    "step_time_s",
)


def timeline(out: Path, started_wall: float, total_s: float, lefts: list) -> dict:
    """What benchmarks/eta_replay.py replays: every trainer step and training batch at its
    record's `time`, in seconds since `rl` started (with the few figures a pace policy or the
    answer lengths may read), the run's end, and each `left ~...` the progress line showed."""
    try:
        lines = (out / "metrics.jsonl").read_text().splitlines()
    except OSError:
        lines = []
    records = []
    for line in lines:
        record = json.loads(line) if line.strip() else {}
        if record.get("component") not in ("trainer", "sft", "orchestrator"):
            continue
        if not isinstance(record.get("time"), int | float):
            continue
        kept = {k: record[k] for k in ("component", "step") if k in record}
        kept["time"] = round(record["time"] - started_wall, 3)
        kept |= {k: record[k] for k in TIMELINE_KEYS if k in record}
        if "reward" in record:
            kept["reward"] = record["reward"]
        records.append(kept)
    return {
        "end_s": round(total_s, 3),
        "records": records,
        "lefts": [[d, round(at, 2), left] for d, at, left in lefts],
    }


def ratios(result: dict) -> dict:
    """measured / estimated per figure (the whole command's wall time against the estimate)."""
    estimate, measured = result.get("estimate") or {}, result.get("measured") or {}
    found = {}
    if estimate.get("wall_s"):
        found["wall"] = result["wall_s"] / estimate["wall_s"]
    if estimate.get("step_s") and result.get("steady_step_s"):
        found["step"] = result["steady_step_s"] / estimate["step_s"]
    for name, value in (estimate.get("memory_bytes") or {}).items():
        got = (measured.get("peak_memory_bytes") or {}).get(name)
        if value and got:
            found[f"mem {name}"] = got / value
    disk = sum((estimate.get("disk_bytes") or {}).values())
    if disk and measured.get("disk_bytes"):
        found["disk"] = measured["disk_bytes"] / disk
    return {k: round(v, 2) for k, v in found.items()}


def table(results: dict) -> str:
    """Markdown rows: job, wall est/meas, step est/meas (the steady step: `steady_step_s`),
    memory per process est/meas, disk est/meas, ratios, ETA after a quarter."""
    gib = 2**30
    from rlcore.forecast.report import gib as size

    rows = [
        "| job | load at start | answers | wall est / meas | step est / meas | trainer GiB | "
        "inference GiB | orchestrator (evals) GiB | disk | ratios (meas / est) | ETA after 1/4 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        estimate, measured = result.get("estimate") or {}, result.get("measured") or {}
        mem_e, mem_m = estimate.get("memory_bytes") or {}, measured.get("peak_memory_bytes") or {}

        def pair(*keys: str, mem_e=mem_e, mem_m=mem_m) -> str:
            key = next((k for k in keys if k in mem_e), None)
            if key is None:
                return "-"
            return f"{mem_e[key] / gib:.2f} / {mem_m.get(key, 0) / gib:.2f}"

        disk_e = sum((estimate.get("disk_bytes") or {}).values())
        disk_m = measured.get("disk_bytes") or 0
        eta = result.get("eta_quarter")
        eta_words = f"{eta['error']:+.0%}" if eta else "-"
        ratio_words = ", ".join(f"{k} {v}" for k, v in ratios(result).items())
        step_m = result.get("steady_step_s")
        step = f"{estimate.get('step_s', 0):.1f} / {step_m:.1f} s" if step_m else "-"
        said = next((b for b in estimate.get("basis") or [] if b.startswith("answers:")), "")
        answers = "measured" if "as the last " in said else "bound" if said else "-"
        load = result.get("load_at_start")
        before = result.get("before_estimate_s") or 0.0
        wall_m = f"{result['wall_s']:.0f} s" + (f" (+{before:.0f} s before)" if before >= 1 else "")
        rows.append(
            f"| {name} | {f'{load:.1f}' if load is not None else '-'} | {answers} | "
            f"{estimate.get('wall_s', 0):.0f} / {wall_m} | {step} | "
            f"{pair('trainer')} | {pair('inference')} | {pair('orchestrator', 'evals')} | "
            f"{size(disk_e)} / {size(disk_m)} | {ratio_words} | {eta_words} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--jobs",
        nargs="*",
        default=list(JOBS),
        choices=[*JOBS, *EVAL_JOBS],
        help="rl jobs by "
        "default; `evals-tiny` and `evals` run `rl eval` (the estimate `evals` prints)",
    )
    parser.add_argument("--avx2", action="store_true", help="run under AVX2_ENV (an AVX2 cap)")
    parser.add_argument("--steps-scale", type=float, default=1.0, help="scale every job's steps")
    parser.add_argument(
        "--extra",
        default="",
        help="more `rl` arguments for every rl job, in one string (`--extra='--async-level 0'` "
        "runs each step's phases one after another, so the metrics show each phase alone; "
        "`rl sft` takes them too: leave it out of --jobs where they are not its own)",
    )
    parser.add_argument("--work", default="outputs/estimates-bench", help="runs and logs here")
    parser.add_argument(
        "--settle-s",
        type=float,
        default=180.0,
        help="before each job, wait up to this long for the 1-minute load average to fall below "
        "1, so that a job's estimate does not count the previous job's processes as other "
        "programs' load (0: no wait)",
    )
    parser.add_argument(
        "--keep-runs",
        action="store_true",
        help="keep each job's checkpoints and weights (1.6 GiB a job; by default they go once "
        "the job's figures are read: logs, metrics and run.json stay)",
    )
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
        settle(args.settle_s)
        if name in EVAL_JOBS:
            print(f"{name}: (load {os.getloadavg()[0]:.1f}) ...", flush=True)
            results[name] = run_eval_job(name, work, env)
            print(f"{name}: {ratios(results[name])}", flush=True)
            continue
        argv, steps = JOBS[name]
        argv = [a.replace("{work}", str(work)) for a in argv] + args.extra.split()
        steps = max(4, round(steps * args.steps_scale))
        print(f"{name}: {steps} steps (load {os.getloadavg()[0]:.1f}) ...", flush=True)
        results[name] = run_job(name, argv, steps, work, env)
        print(f"{name}: {ratios(results[name])} eta {results[name].get('eta_quarter')}", flush=True)
        if not args.keep_runs:
            drop_weights(work / name)
    print("\n" + table(results))
    save("estimates-avx2" if args.avx2 else "estimates", {"jobs": results})


if __name__ == "__main__":
    main()
