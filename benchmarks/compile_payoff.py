"""Does torch.compile pay for itself here? Eager against compiled trainer steps, and what the
compile cache saves a second process.

    .venv/bin/python -m benchmarks.compile_payoff                      # quick start's shape
    .venv/bin/python -m benchmarks.compile_payoff --cache-runs 2       # cold, then warm cache
    .venv/bin/python -m benchmarks.compile_payoff --model ~/.cache/rl-launcher/tiny-qwen3-v1-seed0

The first mode builds one eager and one compiled trainer (`model.compile` false / true) in one
process and alternates their steps on the same synthetic batches, so a machine shared with
other work slows both alike; it prints the first compiled step (the compile), the median and
minimum step of each, and the step by which the compile has paid for itself
(trainer/speed_policy.py's model: compile_s / (eager - compiled)). `--cache-runs N` starts N
processes one after the other on one fresh inductor cache folder, each timing its first compiled
step and the next: the first compiles cold, the others from the cache (trainer/speed.py points the
trainer at `~/.cache/rl-launcher/compile`).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import save  # noqa: E402
from rlcore.config.base import DEFAULT_MODEL  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name or HF folder")
    parser.add_argument("--dtype", default="auto", help="model.dtype")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    parser.add_argument("--seq-len", type=int, default=64, help="tokens per sample")
    parser.add_argument("--micro-batch-tokens", type=int, default=512, help="tokens per pass")
    parser.add_argument("--steps", type=int, default=6, help="timed steps of each, alternating")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    parser.add_argument("--cache-runs", type=int, default=0, help="processes on one new cache")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", default=None, help="where to write the figures (JSON)")
    return parser.parse_args()


def make_trainer(args: argparse.Namespace, out: Path, compile_: bool):
    import torch

    from trainer.config import TrainerConfig
    from trainer.dist import World
    from trainer.train import setup_trainer

    config = TrainerConfig.model_validate(
        {
            "model": {
                "name": args.model,
                "dtype": args.dtype,
                "compile": compile_,
                "activation_checkpointing": False,
            },
            "seq_len": args.seq_len,
            "max_steps": 1000,
            "output_dir": str(out),
            "data": {
                "fake": {"batch_size": args.batch_size},
                "micro_batch_tokens": args.micro_batch_tokens,
            },
            "ckpt": {"enabled": False},
        }
    )
    world = World(rank=0, world_size=1, device=torch.device("cpu"), distributed=False)
    return setup_trainer(config, world)


def timed(trainer, step: int) -> float:
    from trainer.data import fake_batch
    from trainer.train import train_step

    config = trainer.config
    vocab = trainer.model.config.get_text_config().vocab_size
    batch = fake_batch(config.data.fake, config.seq_len, vocab, step, 0)
    start = time.perf_counter()
    train_step(trainer, batch)
    return time.perf_counter() - start


def side_by_side(args: argparse.Namespace) -> dict:
    """Eager and compiled steps alternating in one process."""
    with tempfile.TemporaryDirectory(prefix="rl-compile-") as tmp:
        eager = make_trainer(args, Path(tmp) / "eager", False)
        compiled = make_trainer(args, Path(tmp) / "compiled", True)
        first_eager, first_compiled = timed(eager, 0), timed(compiled, 0)
        rows = []
        for step in range(1, args.steps + 1):
            rows.append({"eager_s": timed(eager, step), "compiled_s": timed(compiled, step)})
            print(
                f"  step {step}: eager {rows[-1]['eager_s']:.3f} s, compiled "
                f"{rows[-1]['compiled_s']:.3f} s",
                flush=True,
            )
        dtype = str(compiled.model.compute_dtype).removeprefix("torch.")
    eager_s = statistics.median(r["eager_s"] for r in rows)
    compiled_s = statistics.median(r["compiled_s"] for r in rows)
    compile_s = first_compiled - compiled_s
    gain = eager_s - compiled_s
    return {
        "dtype": dtype,
        "first_eager_s": first_eager,
        "first_compiled_s": first_compiled,
        "eager_median_s": eager_s,
        "compiled_median_s": compiled_s,
        "eager_min_s": min(r["eager_s"] for r in rows),
        "compiled_min_s": min(r["compiled_s"] for r in rows),
        "compile_s": compile_s,
        "payoff_step": math.ceil(compile_s / gain) if gain > 0 else None,
        "rows": rows,
    }


def compiled_only(args: argparse.Namespace) -> dict:
    """One process: the first compiled step and the next two (a child of --cache-runs)."""
    with tempfile.TemporaryDirectory(prefix="rl-compile-") as tmp:
        trainer = make_trainer(args, Path(tmp), True)
        times = [timed(trainer, step) for step in range(3)]
    return {"first_s": times[0], "next_s": statistics.median(times[1:])}


def cache_runs(args: argparse.Namespace) -> list[dict]:
    """`--cache-runs` processes, one after the other, on one new inductor cache folder."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="rl-inductor-") as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
        argv = [
            f"--model={args.model}",
            f"--dtype={args.dtype}",
            f"--threads={args.threads}",
            f"--batch-size={args.batch_size}",
            f"--seq-len={args.seq_len}",
            f"--micro-batch-tokens={args.micro_batch_tokens}",
            "--child",
        ]
        for i in range(args.cache_runs):
            command = [sys.executable, "-m", "benchmarks.compile_payoff", *argv]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            compile_s = runs[-1]["first_s"] - runs[-1]["next_s"]
            print(
                f"  process {i + 1} ({'cold' if i == 0 else 'warm'} cache): first compiled "
                f"step {runs[-1]['first_s']:.1f} s, then {runs[-1]['next_s']:.2f} s: compile "
                f"about {compile_s:.1f} s",
                flush=True,
            )
    return runs


def main() -> None:
    args = parse_args()
    import logging

    import torch

    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(compiled_only(args)))
        return
    print(
        f"model {args.model}, {args.batch_size} x {args.seq_len} tokens, passes of "
        f"{args.micro_batch_tokens}, {args.threads} threads, torch {torch.__version__}"
    )
    data: dict = {"args": vars(args), "torch": torch.__version__}
    if args.cache_runs:
        data["cache_runs"] = cache_runs(args)
    else:
        data |= side_by_side(args)
        print(
            f"{data['dtype']}: eager {data['eager_median_s']:.3f} s/step (min "
            f"{data['eager_min_s']:.3f}), compiled {data['compiled_median_s']:.3f} (min "
            f"{data['compiled_min_s']:.3f}); first compiled step {data['first_compiled_s']:.1f} s"
            f" (compile about {data['compile_s']:.1f} s); pays for itself by step "
            f"{data['payoff_step'] or 'never'}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
    else:
        save("compile_payoff", data)


if __name__ == "__main__":
    main()
