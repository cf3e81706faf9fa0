"""What oneDNN's per-shape kernel caches cost a CPU trainer: forward and backward of
SmolLM2-135M's linear shapes under bf16 autocast, one pass per step with a random number of
rows (as the trainer's passes vary from step to step), resident memory growth after the passes,
and their time, with torch's default cache capacities and with the bounds the trainer sets
(rlcore/processes/heap.py `bound_kernel_caches`). Each setting runs in a process of its own.

    .venv/bin/python benchmarks/kernel_caches.py [--steps 60] [--round 1]

`--round N` rounds each pass's rows up to a multiple of N (fewer distinct shapes)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SHAPES = [(576, 1536), (1536, 576), (576, 576), (576, 192), (576, 49152)]  # (in, out)

CHILD = """
import json, random, sys, time
import torch
from rlcore.processes import heap
steps, round_to = int(sys.argv[1]), int(sys.argv[2])
def rss_mib():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
torch.manual_seed(0)
random.seed(0)
weights = [torch.randn(o, i, requires_grad=True) for i, o in SHAPES]
heap.trim()
base, start = rss_mib(), time.perf_counter()
for _ in range(steps):
    rows = -(-random.randint(100, 512) // round_to) * round_to
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        for w in weights:
            x = torch.randn(rows, w.shape[1], requires_grad=True)
            torch.nn.functional.linear(x, w).float().sum().backward()
    for w in weights:
        w.grad = None
    heap.trim()
print(json.dumps({"growth_mib": rss_mib() - base, "seconds": time.perf_counter() - start}))
"""


def measure(steps: int, round_to: int, bounded: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _names()}
    if bounded:
        from rlcore.processes.heap import KERNEL_CACHES

        env |= KERNEL_CACHES
    code = f"SHAPES = {SHAPES!r}\n" + CHILD
    out = subprocess.run(
        [sys.executable, "-c", code, str(steps), str(round_to)],
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _names() -> set[str]:
    from rlcore.processes.heap import KERNEL_CACHES

    return set(KERNEL_CACHES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--round", type=int, default=1, dest="round_to")
    args = parser.parse_args()
    for bounded in (False, True):
        result = measure(args.steps, args.round_to, bounded)
        label = "bounded (trainer's)" if bounded else "torch's defaults"
        print(
            f"{label:>20}: +{result['growth_mib']:.0f} MiB after {args.steps} passes, "
            f"{result['seconds']:.1f} s"
        )


if __name__ == "__main__":
    main()
