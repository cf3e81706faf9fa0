"""The trainer's data time per step: load the orchestrator's batch file and pack it into
micro-batches, on realistic batches.

    .venv/bin/python -m benchmarks.batch_load                 # 64 x 512 and 256 x 2048 tokens
    .venv/bin/python -m benchmarks.batch_load --shapes 64x512 --repeats 20

Each shape is N samples of L tokens (a quarter prompt; groups of `--group` samples share a
prompt, as the rollouts of one example do; about 10% of completion tokens are the environment's,
mask 0). The batch is written once with the orchestrator's writer (rlcore.contracts.protocol), then
the trainer's path is timed: load the folder into tensors, take the batch's loss-token count, and
build this rank's micro-batches of at most `--micro-batch-tokens` tokens, with and without shared
prompts. Prints the median and best seconds per step of `--repeats`.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import print_table, save  # noqa: E402


def realistic_batch(num_samples: int, num_tokens: int, group: int, seed: int = 0):
    """`num_samples` samples of `num_tokens` tokens, `group` to a prompt."""
    import numpy as np

    from rlcore.contracts.protocol import Batch, Sample

    rng = np.random.default_rng(seed)
    num_prompt = num_tokens // 4
    num_completion = num_tokens - num_prompt
    samples = []
    for g in range(0, num_samples, group):
        prompt = rng.integers(0, 150_000, num_prompt).tolist()
        for _ in range(min(group, num_samples - g)):
            mask = (rng.random(num_completion) > 0.1).astype(np.int64)
            logprobs = np.where(mask == 1, -rng.random(num_completion) * 3, 0.0)
            samples.append(
                Sample(
                    prompt_ids=list(prompt),
                    completion_ids=rng.integers(0, 150_000, num_completion).tolist(),
                    completion_mask=mask.tolist(),
                    completion_logprobs=logprobs.tolist(),
                    advantage=float(rng.standard_normal()),
                    reward=float(rng.random()),
                    group_id=g // group,  # as the orchestrator's assign_groups numbers them
                )
            )
    return Batch(step=0, temperature=1.0, samples=samples)


def time_load_and_pack(folder: Path, max_tokens: int, share: bool) -> tuple[float, int]:
    """One step's data path as the trainer runs it; (seconds, micro-batches)."""
    from trainer.data import split_for_ranks, wait_for_batch

    start = time.perf_counter()
    batch = wait_for_batch(folder, timeout_s=1)
    batch.total_loss_tokens  # noqa: B018 - the loss's denominator, as forward_backward reads it
    micro_batches = split_for_ranks(batch, max_tokens, 0, 1, share)
    return time.perf_counter() - start, len(micro_batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default="64x512,256x2048", help="NxL, comma-separated")
    parser.add_argument("--group", type=int, default=8, help="samples per prompt")
    parser.add_argument("--micro-batch-tokens", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    import torch

    from rlcore.contracts.protocol import write_batch

    torch.set_num_threads(1)
    results, rows = [], []
    for shape in args.shapes.split(","):
        num_samples, num_tokens = (int(x) for x in shape.split("x"))
        batch = realistic_batch(num_samples, num_tokens, args.group)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp) / "step_0"
            start = time.perf_counter()
            write_batch(batch, folder)
            write_s = time.perf_counter() - start
            for share in (False, True):
                times = []
                for _ in range(args.repeats):
                    seconds, num_rows = time_load_and_pack(folder, args.micro_batch_tokens, share)
                    times.append(seconds)
                median, best = statistics.median(times), min(times)
                label = f"{shape} share_prompts={share}"
                rows.append(
                    (
                        f"{label}: load + pack s/step",
                        f"{median:.4f} (best {best:.4f})",
                        f"{num_rows} micro-batches",
                    )
                )
                results.append(
                    {
                        "shape": shape,
                        "share_prompts": share,
                        "median_s": median,
                        "best_s": best,
                        "num_micro_batches": num_rows,
                        "write_s": write_s,
                    }
                )
            rows.append((f"{shape}: orchestrator write s", f"{write_s:.4f}", "once"))
    print_table("Trainer data time per step (load + pack)", rows)
    save("batch_load", {"micro_batch_tokens": args.micro_batch_tokens, "results": results})


if __name__ == "__main__":
    main()
