"""What this CPU reaches on the trainer's matmuls alone: for each linear layer of the model
(attention projections, MLP, the logprob head) it times the three products of a training pass
on `--tokens` rows (forward X·Wᵀ, input gradient dY·W, weight gradient dYᵀ·X) in a plain loop,
and prints each shape's GFLOP/s and the whole model's limit: the FLOPs of one forward and
backward pass over all layers divided by the summed time of its matmuls. The trainer's
achieved figure (`benchmarks/trainer_throughput.py --peak-tflops <limit>`, or a run's
`forward_s + backward_s` in `vs_trl.py --sweep`) is then a share of a number measured here.

    python -m benchmarks.matmul_limit                          # the quick start's model, 512 rows
    python -m benchmarks.matmul_limit --tokens 2048 --dtypes float32 --threads 2
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import save  # noqa: E402
from rlcore.config.base import DEFAULT_MODEL  # noqa: E402


def linear_shapes(config: dict) -> list[tuple[str, int, int, int]]:
    """(name, in, out, count) for every matmul weight of a decoder model's config.json."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads")
    head_dim = config.get("head_dim") or hidden // heads
    kv = (kv_heads or heads) * head_dim
    layers = config["num_hidden_layers"]
    return [
        ("q_proj", hidden, heads * head_dim, layers),
        ("k_proj", hidden, kv, layers),
        ("v_proj", hidden, kv, layers),
        ("o_proj", heads * head_dim, hidden, layers),
        ("gate_proj", hidden, inter, layers),
        ("up_proj", hidden, inter, layers),
        ("down_proj", inter, hidden, layers),
        ("lm_head", hidden, config["vocab_size"], 1),
    ]


def time_products(tokens: int, n_in: int, n_out: int, dtype, repeats: int) -> float:
    """Best-of-`repeats` seconds for the forward and both gradient products of one layer."""
    import torch

    x = torch.randn(tokens, n_in, dtype=dtype)
    w = torch.randn(n_out, n_in, dtype=dtype)
    dy = torch.randn(tokens, n_out, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):  # the first round warms up
        start = time.perf_counter()
        torch.nn.functional.linear(x, w)
        dy @ w
        dy.t() @ x
        best = min(best, time.perf_counter() - start)
    return best


def measure(config: dict, tokens: int, dtype_name: str, repeats: int) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    rows, total_flops, total_s = [], 0.0, 0.0
    for name, n_in, n_out, count in linear_shapes(config):
        seconds = time_products(tokens, n_in, n_out, dtype, repeats)
        flops = 3 * 2 * tokens * n_in * n_out
        rows.append(
            {
                "name": name,
                "in": n_in,
                "out": n_out,
                "count": count,
                "gflops": flops / seconds / 1e9,
            }
        )
        total_flops += flops * count
        total_s += seconds * count
    return {
        "dtype": dtype_name,
        "tokens": tokens,
        "shapes": rows,
        "limit_tflops": total_flops / total_s / 1e12,
        "pass_s": total_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="an HF folder (default: the quick start's)")
    parser.add_argument("--tokens", type=int, default=512, help="rows per pass (micro-batch)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    import torch

    from rlcore.host.models import resolve_model

    torch.set_num_threads(args.threads)
    folder = Path(resolve_model(args.model or DEFAULT_MODEL))
    config = json.loads((folder / "config.json").read_text())
    results = []
    for dtype in args.dtypes.split(","):
        result = measure(config, args.tokens, dtype, args.repeats)
        results.append(result)
        print(f"{folder.name}, {args.tokens} rows, {dtype}, {args.threads} threads:")
        for row in result["shapes"]:
            shape = f"{row['in']} x {row['out']} (x{row['count']})"
            print(f"  {row['name']:<10} {shape:>20} {row['gflops']:8.1f} GFLOP/s")
        print(
            f"  limit for a whole pass: {result['limit_tflops'] * 1e3:.1f} GFLOP/s "
            f"({result['pass_s']:.3f} s of matmuls per {args.tokens} tokens)"
        )
    save("matmul_limit", {"model": folder.name, "threads": args.threads, "results": results})


if __name__ == "__main__":
    main()
