# ruff: noqa: E501  (table rows read best one per line)
"""Weight hand-off and checkpoint cost of the default model, against a plain copy of the same
bytes on the same disk (the physical limit).

Hand-off = trainer save of `weights/step_<n>` (publish_weights) + inference load of it
(POST /update_weights on a real vLLM server). Checkpoint = trainer save and load with
torch.distributed.checkpoint (model + AdamW state).

    python benchmarks/weights_and_checkpoints.py [--repeats 3] [--dtype bfloat16] [--port 8390]
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
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def plain_copy_s(src: Path, dst: Path) -> float:
    """Copy every byte of `src` and fsync it, like the real writers' data reaching the disk."""
    import os

    started = time.perf_counter()
    shutil.copytree(src, dst)
    for f in dst.rglob("*"):
        if f.is_file():
            with f.open("rb") as fh:
                os.fsync(fh.fileno())
    return time.perf_counter() - started


def setup_trainer_side(dtype: str):
    from rlcore.config.base import DEFAULT_MODEL
    from rlcore.host.models import resolve_model
    from trainer.config import OptimConfig, TrainerModelConfig
    from trainer.dist import setup_world
    from trainer.model import load_model
    from trainer.optim import build_optimizer

    source = resolve_model(DEFAULT_MODEL)
    world = setup_world()
    model = load_model(TrainerModelConfig(dtype=dtype), source, world)
    optimizer, scheduler = build_optimizer(model, OptimConfig(lr=1e-6), max_steps=10)
    loss = model(input_ids=__import__("torch").tensor([[1, 2, 3, 4]])).logits.float().mean()
    loss.backward()
    optimizer.step()  # AdamW moments exist, as in a real checkpoint
    return source, world, model, optimizer, scheduler


def bench_handoff(args, root: Path, source, world, model) -> dict:
    from rlcore.runs.rundir import RunDir
    from tests.inference_process import InferenceProcess
    from trainer.weights import publish_weights

    run = RunDir(root)
    run.claim()  # before the server's log appears in it
    server = InferenceProcess(
        [
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
        ],
        root / "inference.log",
    ).start()
    saves, loads, copies = [], [], []
    try:
        server.wait_ready(900)
        for step in range(1, args.repeats + 1):
            started = time.perf_counter()
            publish_weights(run, step, model, world, Path(source), source)
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            swap_weights(server, {"weight_dir": str(run.weight_dir(step))})
            loads.append(time.perf_counter() - started)
            copies.append(plain_copy_s(run.weight_dir(step), root / f"copy_{step}"))
    finally:
        server.stop()
    nbytes = folder_bytes(run.weight_dir(1))
    return {
        "bytes": nbytes,
        "save_s": statistics.median(saves),
        "load_s": statistics.median(loads),
        "copy_s": statistics.median(copies),
    }


def bench_checkpoint(args, root: Path, world, model, optimizer, scheduler) -> dict:
    from rlcore.runs.rundir import RunDir
    from trainer.ckpt import PART, load_checkpoint, save_checkpoint

    run = RunDir(root)
    saves, loads, copies = [], [], []
    for step in range(1, args.repeats + 1):
        started = time.perf_counter()
        save_checkpoint(run, step, model, optimizer, scheduler, world, {}, ("trainer",))
        saves.append(time.perf_counter() - started)
        started = time.perf_counter()
        load_checkpoint(run, step, model, optimizer, scheduler, world)
        loads.append(time.perf_counter() - started)
        copies.append(plain_copy_s(run.part_dir(step, PART), root / f"ckpt_copy_{step}"))
    return {
        "bytes": folder_bytes(run.part_dir(1, PART)),
        "save_s": statistics.median(saves),
        "load_s": statistics.median(loads),
        "copy_s": statistics.median(copies),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--port", type=int, default=8390)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rl-weights-bench-"))
    source, world, model, optimizer, scheduler = setup_trainer_side(args.dtype)
    hand = bench_handoff(args, root / "handoff", source, world, model)
    ckpt = bench_checkpoint(args, root / "ckpt", world, model, optimizer, scheduler)
    gib = 2**30
    rows = [
        ("weights folder", f"{hand['bytes'] / gib:.3f} GiB", args.dtype),
        ("trainer save (publish)", f"{hand['save_s']:.2f} s", ""),
        ("inference load (/update_weights)", f"{hand['load_s']:.2f} s", ""),
        ("hand-off total", f"{hand['save_s'] + hand['load_s']:.2f} s", "save + load"),
        ("plain copy of the same bytes", f"{hand['copy_s']:.2f} s", "physical limit"),
        ("hand-off / copy", f"{(hand['save_s'] + hand['load_s']) / hand['copy_s']:.1f}x", ""),
        ("checkpoint size", f"{ckpt['bytes'] / gib:.3f} GiB", "model + AdamW state"),
        (
            "checkpoint save",
            f"{ckpt['save_s']:.2f} s",
            f"{ckpt['bytes'] / gib / ckpt['save_s']:.2f} GiB/s",
        ),
        (
            "checkpoint load",
            f"{ckpt['load_s']:.2f} s",
            f"{ckpt['bytes'] / gib / ckpt['load_s']:.2f} GiB/s",
        ),
        (
            "plain copy of checkpoint",
            f"{ckpt['copy_s']:.2f} s",
            f"{ckpt['bytes'] / gib / ckpt['copy_s']:.2f} GiB/s",
        ),
    ]
    print_table("Weight hand-off and checkpoints (default model, CPU)", rows)
    save("weights_and_checkpoints", {"handoff": hand, "checkpoint": ckpt, "dtype": args.dtype})
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
