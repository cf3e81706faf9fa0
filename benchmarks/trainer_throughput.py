"""Trainer throughput on synthetic batches (no orchestrator, no weight publishing).

    .venv/bin/python benchmarks/trainer_throughput.py                  # default model, CPU
    .venv/bin/python benchmarks/trainer_throughput.py --model PATH --dtypes float32 --steps 5

Times `train_step` (pack, forward, backward, clip, AdamW) on batches of `--batch-size` samples
of `--seq-len` tokens, after one warm-up step, and prints seconds per step and tokens per second
for each dtype.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlcore.config import DEFAULT_MODEL  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model name or HF folder")
    parser.add_argument("--dtypes", default="bfloat16,float32", help="comma-separated dtypes")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    parser.add_argument("--seq-len", type=int, default=128, help="tokens per sample")
    parser.add_argument(
        "--micro-batch-tokens",
        type=int,
        default=None,
        help="tokens per forward pass (data.micro_batch_tokens); default: the whole batch",
    )
    parser.add_argument(
        "--checkpointing", action="store_true", help="model.activation_checkpointing = true"
    )
    parser.add_argument(
        "--logprob-chunk-tokens",
        type=lambda v: None if v == "none" else int(v),
        default=2048,
        help="model.logprob_chunk_tokens ('none': full logits)",
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch CPU threads")
    return parser.parse_args()


def bench(args: argparse.Namespace, dtype: str) -> tuple[list[float], list[float], float]:
    """Wall-clock and process CPU seconds per timed step, and the peak memory in bytes (GPU
    memory allocated, or the process's peak resident memory on CPU: on CPU run one dtype per
    process to read it)."""
    import resource

    import torch

    from rlcore.models import resolve_model
    from rlcore.rundir import RunDir
    from trainer.config import TrainerConfig
    from trainer.data import fake_batch
    from trainer.dist import setup_world
    from trainer.loss import build_loss
    from trainer.model import load_model
    from trainer.optim import build_optimizer
    from trainer.train import Trainer, train_step

    config = TrainerConfig.model_validate(
        {
            "model": {
                "name": args.model,
                "dtype": dtype,
                "activation_checkpointing": args.checkpointing,
                "logprob_chunk_tokens": args.logprob_chunk_tokens,
            },
            "seq_len": args.seq_len,
            "data": {
                "fake": {"batch_size": args.batch_size},
                "micro_batch_tokens": args.micro_batch_tokens or args.batch_size * args.seq_len,
            },
        }
    )
    world = setup_world()
    source = resolve_model(args.model)
    model = load_model(config.model, source, world)
    optimizer, scheduler = build_optimizer(model, config.optim, config.max_steps)
    trainer = Trainer(
        config, world, RunDir("unused"), model, optimizer, scheduler, build_loss(config.loss),
        sender=None, logger=None,
    )  # fmt: skip
    vocab_size = model.config.get_text_config().vocab_size
    times, cpu_times = [], []
    for step in range(args.steps + 1):
        batch = fake_batch(config.data.fake, args.seq_len, vocab_size, step, 0)
        start, cpu_start = time.perf_counter(), time.process_time()
        train_step(trainer, batch)
        if world.device.type == "cuda":
            torch.cuda.synchronize()
        if step > 0:  # the first step pays for lazy initialisation
            times.append(time.perf_counter() - start)
            cpu_times.append(time.process_time() - cpu_start)
    if world.device.type == "cuda":
        peak = float(torch.cuda.max_memory_allocated())
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0
    return times, cpu_times, peak


def estimate(args: argparse.Namespace, dtype: str) -> str:
    """The pre-flight estimate of the same setup (launcher.memory)."""
    from launcher.memory import describe, model_shape, trainer_peak
    from rlcore.models import resolve_model

    shape = model_shape(Path(resolve_model(args.model)))
    if shape is None:
        return "no estimate (the model folder does not say its shape)"
    tokens = args.micro_batch_tokens or args.batch_size * args.seq_len
    compute_bytes = 4 if dtype == "float32" else 2
    parts = trainer_peak(
        shape, tokens, compute_bytes, args.checkpointing, head_chunk=args.logprob_chunk_tokens
    )
    return describe(parts)


def main() -> None:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    num_tokens = args.batch_size * args.seq_len
    device = "cuda" if torch.cuda.is_available() else f"cpu ({args.threads} threads)"
    mbt = args.micro_batch_tokens or num_tokens
    print(
        f"model {args.model}, {args.batch_size} x {args.seq_len} tokens, {device}, "
        f"{mbt} tokens per forward pass"
    )
    for dtype in args.dtypes.split(","):
        times, cpu_times, peak = bench(args, dtype)
        median = statistics.median(times)
        print(
            f"{dtype:>9}: {median:.2f} s/step (min {min(times):.2f}, max {max(times):.2f}), "
            f"{num_tokens / median:.0f} tokens/s; {statistics.median(cpu_times):.1f} CPU-s/step "
            "(a busy shared CPU inflates wall time, not CPU time)",
            flush=True,
        )
        print(
            f"{'':>9}  peak memory {peak / 2**30:.2f} GiB; "
            f"pre-flight estimate {estimate(args, dtype)}"
        )


if __name__ == "__main__":
    main()
