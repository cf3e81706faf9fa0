"""The SFT example, measured: SmolLM2-135M-Instruct on two-digit addition, as base, after SFT,
after RL from base and after RL from the SFT folder, each evaluated on the 100 held-out sums
(`examples/sft_then_rl/eval.toml`); and the steps and wall time each RL run took to reach a
training reward (mean of 3 steps) of `--target`. Runs the README's commands one after another
(the RL runs with `--deterministic --seed 0`, so their curves repeat exactly).

    python -m benchmarks.sft_then_rl                 # ~30 min on 2 cores
    python -m benchmarks.sft_then_rl --rl-steps 10   # shorter RL runs
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402

EXAMPLE = "examples/sft_then_rl"
REUSE = False
"""--reuse: steps that finished in an earlier call are not run again."""
RL_CONFIGS = [
    "--trainer",
    "@",
    "configs/quickstart/train.toml",
    "--orchestrator",
    "@",
    f"{EXAMPLE}/orch.toml",
    "--inference",
    "@",
    "configs/quickstart/infer.toml",
]


def step(name: str, argv: list[str], work: Path) -> float:
    """Run one command to the end (its output in work/<name>.log); its wall time. With
    --reuse, a step that finished in an earlier call is not run again (work/stages.json)."""
    stages_file = work / "stages.json"
    stages = json.loads(stages_file.read_text()) if stages_file.exists() else {}
    if REUSE and name in stages:
        print(f"{name}: {stages[name]:.0f} s (earlier call)", flush=True)
        return stages[name]
    log = work / f"{name}.log"
    started = time.perf_counter()
    with log.open("w") as sink:
        code = subprocess.run(argv, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT).returncode
    wall_s = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{name} exited with {code}; see {log}")
    print(f"{name}: {wall_s:.0f} s", flush=True)
    stages_file.write_text(json.dumps({**stages, name: wall_s}) + "\n")
    return wall_s


def evaluate(name: str, work: Path, *args: str) -> dict:
    out = work / f"eval-{name}"
    step(
        f"eval-{name}",
        rl_argv("eval", "@", f"{EXAMPLE}/eval.toml", "--output-dir", str(out), *args),
        work,
    )
    return json.loads((out / "summary.json").read_text())["rl-add-digits"]


def rl_run(name: str, work: Path, steps: int, *args: str) -> tuple[float, Path]:
    out = work / name
    argv = rl_argv(
        *RL_CONFIGS,
        "--output-dir",
        str(out),
        "--max-steps",
        str(steps),
        "--deterministic",
        "--seed",
        "0",
        "--clean",
        *args,
    )
    started = time.time()
    wall_s = step(name, argv, work)
    if time.time() - started > 1:  # run now, not taken from an earlier call
        (out / "started").write_text(f"{started}\n")
    return wall_s, out


def time_to_target(out: Path, target: float, window: int = 3) -> dict:
    """The first step whose last-`window` training reward reaches `target`, and the seconds
    from `rl`'s start to that step's record; the curve."""
    started = float((out / "started").read_text())
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    training = {r["step"]: r for r in records if r["component"] == "orchestrator" and "reward" in r}
    steps = sorted(training)
    rewards = [training[s]["reward"] for s in steps]
    found = {"curve": [round(r, 3) for r in rewards], "step": None, "seconds": None}
    for i in range(window - 1, len(steps)):
        if sum(rewards[i - window + 1 : i + 1]) / window >= target:
            found |= {"step": steps[i], "seconds": training[steps[i]]["time"] - started}
            break
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", default="outputs/sft-then-rl-bench", help="runs and logs here")
    parser.add_argument("--rl-steps", type=int, default=25)
    parser.add_argument("--target", type=float, default=0.6, help="training reward to reach")
    parser.add_argument(
        "--reuse", action="store_true", help="keep the steps an earlier call finished in --work"
    )
    args = parser.parse_args()
    global REUSE
    REUSE = args.reuse
    work = (REPO / args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, f"{EXAMPLE}/make_data.py"], cwd=REPO, check=True)
    sft_out = work / "sft"
    results: dict = {"target": args.target, "rl_steps": args.rl_steps, "wall_s": {}}
    results["eval"] = {"base": evaluate("base", work)}
    sft_argv = rl_argv("sft", "@", f"{EXAMPLE}/sft.toml", "--output-dir", str(sft_out), "--clean")
    results["wall_s"]["sft"] = step("sft", sft_argv, work)
    sft_model = str(max((sft_out / "weights").glob("step_*"), key=lambda p: int(p.name[5:])))
    results["eval"]["sft"] = evaluate("sft", work, "--model.name", sft_model)
    for name, extra in (("rl-base", ()), ("rl-sft", ("--model.name", sft_model))):
        wall_s, out = rl_run(name, work, args.rl_steps, *extra)
        results["wall_s"][name] = wall_s
        results[name] = time_to_target(out, args.target)
        results["eval"][name] = evaluate(name, work, "--run", str(out))
    report(results)
    save("sft_then_rl", results)


def report(results: dict) -> None:
    print("\nheld-out two-digit sums (100 x 4 rollouts, temperature 1):")
    print(f"{'model':<10} {'reward':>7} {'pass@1':>7} {'pass@4':>7}")
    for name, s in results["eval"].items():
        print(f"{name:<10} {s['reward']:>7.3f} {s['pass@1']:>7.3f} {s['pass@4']:>7.3f}")
    print(f"\nRL to a training reward of {results['target']} (mean of 3 steps):")
    for name in ("rl-base", "rl-sft"):
        found = results[name]
        reached = (
            f"step {found['step']}, {found['seconds']:.0f} s"
            if found["step"] is not None
            else f"not within {results['rl_steps']} steps"
        )
        print(f"{name:<8} {reached}; curve {found['curve']}")
    print("wall times:", {k: round(v) for k, v in results["wall_s"].items()})


if __name__ == "__main__":
    main()
