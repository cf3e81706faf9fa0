"""The quick start against TRL's GRPOTrainer on the same machine, one after the other: the same
job (the bundled SmolLM2-135M, one-digit addition, 25 steps of 4 prompts x 8 rollouts, 16
tokens, lr 3e-5, token-level loss, temperature 1, truncated answers score 0, no KL term), and
the ratios ours / TRL's of wall time (command to exit), steady step (steps 5-24), peak memory
over all processes, bytes written to disk, and the last-5 mean reward.

    python benchmarks/vs_trl.py [--seeds 0,1] [--skip-trl] [--skip-ours] [--trl-version X]
                                [our side's extra rl flags: --weight-transfer.type collective]

TRL never enters the project's environment: the script builds its own with uv in the cache
folder (`trl-env/`: trl plus the torch, transformers, datasets and accelerate versions this
environment has, so both sides run the same kernels) and runs TRL there on plain HF generate
in fp32. Bars (issue "beat TRL"): wall <= 0.8x, last-5 reward >= 0.8, memory <= 8 GiB,
<= 2 GB written.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from importlib.metadata import version
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, rl_argv, save  # noqa: E402
from benchmarks.launcher_overhead import QUICKSTART  # noqa: E402
from rlcore.metrics import read_records  # noqa: E402
from rlcore.models import cache_dir, default_model_dir  # noqa: E402

STEPS, PROMPTS, GROUP, MAX_TOKENS, LR = 25, 4, 8, 16, 3e-5
SHARED_PACKAGES = ("torch", "transformers", "datasets", "accelerate")
TRL_SCRIPT = Path(__file__).with_name("trl_grpo_job.py")


class Watch:
    """Peak resident memory summed over a process tree, and bytes it wrote (sampled)."""

    def __init__(self, proc: subprocess.Popen, interval_s: float = 0.5):
        self.proc, self.interval_s = proc, interval_s
        self.peak_rss, self.written = 0, {}
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        root = psutil.Process(self.proc.pid)
        while self.proc.poll() is None:
            rss = 0
            try:
                tree = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in tree:
                try:
                    rss += p.memory_info().rss
                    self.written[p.pid] = p.io_counters().write_bytes
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.peak_rss = max(self.peak_rss, rss)
            time.sleep(self.interval_s)

    def result(self) -> dict[str, float]:
        self.thread.join()
        return {"peak_gib": self.peak_rss / 2**30, "written_gb": sum(self.written.values()) / 1e9}


def timed(argv: list[str], log: Path, cwd: Path = REPO) -> dict[str, float]:
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        watch = Watch(proc)
        code = proc.wait()
    return {"exit_code": code, "wall_s": time.perf_counter() - started} | watch.result()


def trl_python(trl_version: str | None) -> Path:
    """The interpreter of the TRL environment, built once with uv."""
    env = cache_dir() / "trl-env"
    python = env / "bin" / "python"
    if not python.exists():
        uv = shutil.which("uv") or sys.exit("vs_trl: needs uv on PATH (pip install uv)")
        subprocess.run([uv, "venv", "--python", sys.executable, str(env)], check=True)
        pins = [f"{name}=={version(name)}" for name in SHARED_PACKAGES]
        trl = f"trl=={trl_version}" if trl_version else "trl"
        cmd = [uv, "pip", "install", "--python", str(python), trl, *pins, "psutil"]
        subprocess.run(cmd, check=True)
    return python


def write_dataset(path: Path, seed: int) -> None:
    """The quick start's training prompts, in its order of examples (chat messages)."""
    from rl_add_digits import load_environment

    rows = load_environment(seed=seed).dataset.to_list()
    with path.open("w") as out:
        for row in rows:
            out.write(json.dumps({"prompt": row["prompt"], "answer": row["answer"]}) + "\n")


def run_trl(seed: int, work: Path, trl_version: str | None) -> dict:
    data, result = work / "trl_data.jsonl", work / "trl_result.json"
    write_dataset(data, seed)
    argv = [str(trl_python(trl_version)), str(TRL_SCRIPT), "--model", str(default_model_dir()),
            "--data", str(data), "--out", str(work / "trl_out"), "--result", str(result),
            "--seed", str(seed), "--steps", str(STEPS), "--prompts", str(PROMPTS),
            "--group", str(GROUP), "--max-tokens", str(MAX_TOKENS), "--lr", str(LR)]  # fmt: skip
    figures = timed(argv, work / "trl.log")
    return figures | (json.loads(result.read_text()) if result.exists() else {})


def run_ours(seed: int, work: Path, extra: list[str]) -> dict:
    out = work / "ours"
    argv = rl_argv(*QUICKSTART, "--seed", str(seed), "--output-dir", str(out), "--clean", *extra)
    figures = timed(argv, work / "ours.log")
    metrics = out / "metrics.jsonl"
    records = read_records(metrics)[0] if metrics.exists() else []
    rewards = [r["reward"] for r in records if r["component"] == "orchestrator"]
    steps = [r["step_time_s"] for r in records if r["component"] == "trainer"]
    return figures | {"rewards": rewards, "step_s": steps[5:] or steps}


def summary(side: dict) -> dict:
    rewards, steps = side.get("rewards", []), side.get("step_s", [])
    return {
        "wall_s": side["wall_s"],
        "steady_step_s": sorted(steps)[len(steps) // 2] if steps else float("nan"),
        "peak_gib": side["peak_gib"],
        "written_gb": side["written_gb"],
        "last5_reward": sum(rewards[-5:]) / len(rewards[-5:]) if rewards else float("nan"),
        "exit_code": side["exit_code"],
    }


def print_row(seed: int, ours: dict, trl: dict) -> None:
    print(f"\nseed {seed}: {'measure':<16} {'ours':>10} {'TRL':>10} {'ratio':>8}")
    for key in ("wall_s", "steady_step_s", "peak_gib", "written_gb", "last5_reward"):
        a, b = ours.get(key, float("nan")), trl.get(key, float("nan"))
        ratio = a / b if b else float("nan")
        print(f"        {key:<16} {a:>10.2f} {b:>10.2f} {ratio:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--skip-trl", action="store_true")
    parser.add_argument("--skip-ours", action="store_true")
    parser.add_argument("--trl-version", default=None)
    args, extra = parser.parse_known_args()
    results = {}
    for seed in map(int, args.seeds.split(",")):
        with tempfile.TemporaryDirectory(prefix="vs_trl_") as tmp:
            work = Path(tmp)
            trl = {} if args.skip_trl else summary(run_trl(seed, work, args.trl_version))
            ours = {} if args.skip_ours else summary(run_ours(seed, work, extra))
        results[seed] = {"ours": ours, "trl": trl}
        print_row(seed, ours, trl)
    save("vs_trl", results)


if __name__ == "__main__":
    main()
