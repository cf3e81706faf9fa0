# ruff: noqa: E501  (table rows read best one per line)
"""LoRA against full weights, default model: size of what is published each step, trainer save
(publish) and inference load (POST /update_weights on a real vLLM server), and the trainer
checkpoint (adapter + its AdamW state against model + AdamW state).

The full-weight hand-off runs against a plain server, the adapter one against a server started
with `inference.lora` (vLLM's --enable-lora); both serve the model in `--dtype`.

    python benchmarks/lora_handoff.py [--repeats 3] [--dtype bfloat16] [--rank 16] [--port 8391]
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import print_table, save, swap_weights  # noqa: E402


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and f.name != "STABLE")


def post(url: str, body: dict) -> dict:
    import httpx

    response = httpx.post(url, json=body, timeout=600)
    response.raise_for_status()
    return response.json()


def complete(url: str, model: str) -> None:
    post(f"{url}/v1/completions", {"model": model, "prompt": "1 + 2 =", "max_tokens": 4})


def batch_s(url: str, model: str, num_requests: int = 32, max_tokens: int = 16) -> float:
    """Seconds for `num_requests` concurrent completions of exactly `max_tokens` tokens."""
    from concurrent.futures import ThreadPoolExecutor

    body = {
        "model": model,
        "prompt": "Count: 1, 2, 3,",
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "temperature": 1.0,
    }
    started = time.perf_counter()
    with ThreadPoolExecutor(num_requests) as pool:
        list(pool.map(lambda _: post(f"{url}/v1/completions", body), range(num_requests)))
    return time.perf_counter() - started


def trainer_side(dtype: str, rank: int | None):
    """The default model as the trainer holds it (with rank-`rank` adapters, or all weights
    trainable), one AdamW step taken so that optimizer state exists."""
    import torch

    from rlcore.config.base import DEFAULT_MODEL
    from rlcore.host.models import resolve_model
    from trainer.config import LoraConfig, OptimConfig, TrainerModelConfig
    from trainer.dist import setup_world
    from trainer.model import load_model
    from trainer.optim import build_optimizer

    source = resolve_model(DEFAULT_MODEL)
    world = setup_world()
    lora = LoraConfig(rank=rank, alpha=2.0 * rank) if rank else None
    config = TrainerModelConfig(dtype=dtype, serving_dtype=dtype)
    model = load_model(config, source, world, lora)
    optimizer, scheduler = build_optimizer(model, OptimConfig(lr=1e-3), max_steps=10)
    model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits.float().mean().backward()
    optimizer.step()  # moves B off zero: the adapter changes the outputs, as after training
    return source, world, model, optimizer, scheduler


def bench_handoff(args, root: Path, trainer, lora: bool) -> dict:
    from rlcore.runs.rundir import RunDir
    from tests.inference_process import InferenceProcess
    from trainer.weights import publish_weights

    source, world, model = trainer[:3]
    run = RunDir(root)
    run.claim()  # before the server's log appears in it
    flags = [
        "--model.name",
        source,
        "--server.port",
        str(args.port),
        "--output-dir",
        str(root),
        "--model.dtype",
        args.dtype,
        "--cpu.kvcache-space-gib",
        "1",
    ]
    if lora:
        flags += ["--lora.max-rank", str(max(8, args.rank))]
    server = InferenceProcess(flags, root / "inference.log").start()
    saves, loads, firsts = [], [], []
    try:
        server.wait_ready(900)
        for step in range(1, args.repeats + 1):
            started = time.perf_counter()
            publish_weights(run, step, model, world, Path(source), source)
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            answer = swap_weights(server, {"weight_dir": str(run.weight_dir(step))})
            loads.append(time.perf_counter() - started)
            started = time.perf_counter()
            complete(server.url, answer.get("model", source))
            firsts.append(time.perf_counter() - started)
        batches = {"base": batch_s(server.url, source)}
        if lora:
            batches["adapter"] = batch_s(server.url, answer["model"])
    finally:
        server.stop()
    return {
        "bytes": folder_bytes(run.weight_dir(1)),
        "save_s": statistics.median(saves),
        "load_s": statistics.median(loads),
        "first_request_s": statistics.median(firsts),
        "batch_s": batches,
    }


def bench_checkpoint(root: Path, trainer) -> dict:
    from rlcore.runs.rundir import RunDir
    from trainer.ckpt import PART, save_checkpoint

    _, world, model, optimizer, scheduler = trainer
    run = RunDir(root)
    started = time.perf_counter()
    save_checkpoint(run, 1, model, optimizer, scheduler, world, {}, ("trainer",))
    return {"bytes": folder_bytes(run.part_dir(1, PART)), "save_s": time.perf_counter() - started}


def measure(args, root: Path, rank: int | None) -> dict:
    trainer = trainer_side(args.dtype, rank)
    name = "lora" if rank else "full"
    hand = bench_handoff(args, root / f"{name}-handoff", trainer, lora=bool(rank))
    return hand | {"ckpt": bench_checkpoint(root / f"{name}-ckpt", trainer)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--port", type=int, default=8391)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rl-lora-bench-"))
    full = measure(args, root, None)
    lora = measure(args, root, args.rank)
    mib = 2**20
    rows = [
        ("published per step: full weights", f"{full['bytes'] / mib:.1f} MiB", args.dtype),
        (
            f"published per step: rank-{args.rank} adapter",
            f"{lora['bytes'] / mib:.1f} MiB",
            f"{lora['bytes'] / full['bytes']:.1%} of full",
        ),
        ("trainer save (publish): full", f"{full['save_s']:.2f} s", ""),
        (
            "trainer save (publish): adapter",
            f"{lora['save_s']:.2f} s",
            f"{full['save_s'] / lora['save_s']:.1f}x faster",
        ),
        ("inference load: full (reload in place)", f"{full['load_s']:.2f} s", ""),
        (
            "inference load: adapter (add LoRA, drop old)",
            f"{lora['load_s']:.2f} s",
            f"{full['load_s'] / lora['load_s']:.1f}x faster",
        ),
        ("first 4-token request after load: full", f"{full['first_request_s']:.2f} s", ""),
        ("first 4-token request after load: adapter", f"{lora['first_request_s']:.2f} s", ""),
        ("32 x 16 tokens: plain server", f"{full['batch_s']['base']:.2f} s", "generation"),
        ("32 x 16 tokens: LoRA server, base model", f"{lora['batch_s']['base']:.2f} s", ""),
        (
            "32 x 16 tokens: LoRA server, adapter",
            f"{lora['batch_s']['adapter']:.2f} s",
            f"{lora['batch_s']['adapter'] / full['batch_s']['base']:.1f}x the plain server",
        ),
        (
            "checkpoint: full (model + AdamW)",
            f"{full['ckpt']['bytes'] / mib:.0f} MiB",
            f"save {full['ckpt']['save_s']:.2f} s",
        ),
        (
            "checkpoint: adapter (+ AdamW)",
            f"{lora['ckpt']['bytes'] / mib:.0f} MiB",
            f"save {lora['ckpt']['save_s']:.2f} s",
        ),
    ]
    print_table(f"LoRA against full weights (default model, CPU, {args.dtype})", rows)
    save("lora_handoff", {"full": full, "lora": lora, "dtype": args.dtype, "rank": args.rank})
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
