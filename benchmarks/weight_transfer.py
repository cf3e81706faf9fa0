# ruff: noqa: E501  (table rows read best one per line)
"""Time from "trainer step done" to "inference serves the new policy" for the default model on
CPU: the filesystem transport (write `weights/step_<n>`, then POST /update_weights and its
reload) against the collective one (offer, the orchestrator's request, gloo broadcast into the
real vLLM server's workers). One real server at a time; the first collective update also makes
the group and is reported apart.

    python benchmarks/weight_transfer.py [--repeats 3] [--dtype bfloat16] [--port 8391]
"""

import argparse
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import print_table, save, swap_weights  # noqa: E402


def trainer_model(dtype: str):
    from rlcore.config.base import DEFAULT_MODEL
    from rlcore.host.models import resolve_model
    from trainer.config import TrainerModelConfig
    from trainer.dist import setup_world
    from trainer.model import load_model

    source = resolve_model(DEFAULT_MODEL)
    world = setup_world()
    config = TrainerModelConfig(dtype=dtype, serving_dtype=dtype)
    return source, world, load_model(config, source, world)


def start_server(args, source: str, root: Path, *extra: str):
    from tests.inference_process import InferenceProcess

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
            *extra,
        ],
        root / "inference.log",
    ).start()
    server.wait_ready(900)
    return server


def bench_filesystem(args, root: Path, source: str, world, model) -> list[float]:
    from rlcore.runs.rundir import RunDir
    from trainer.weights import publish_weights

    run = RunDir(root)
    run.claim()
    server = start_server(args, source, root)
    times = []
    try:
        for step in range(1, args.repeats + 1):
            started = time.perf_counter()
            publish_weights(run, step, model, world, Path(source), source)
            swap_weights(server, {"weight_dir": str(run.weight_dir(step))})
            times.append(time.perf_counter() - started)
    finally:
        server.stop()
    return times


def collective_update(server, sender, run, step: int) -> float:
    """The trainer publishes `step` (in a thread, as it blocks until asked); the orchestrator's
    receiver sees the offer, asks for it and POSTs; seconds until the server answered."""
    import asyncio

    from orchestrator.collective import CollectiveReceiver

    started = time.perf_counter()
    thread = threading.Thread(target=sender.publish, args=(step,))
    thread.start()
    receiver = CollectiveReceiver(run)
    asyncio.run(receiver.wait(step, step, 120))
    swap_weights(server, receiver.server_requests(receiver.load_request(step), 1)[0])
    elapsed = time.perf_counter() - started
    thread.join(timeout=120)
    return elapsed


def bench_collective(args, root: Path, source: str, world, model) -> list[float]:
    from rlcore.config.base import CollectiveTransferConfig
    from rlcore.processes.health import free_port
    from rlcore.runs.rundir import RunDir
    from trainer.collective import CollectiveSender

    run = RunDir(root)
    run.claim()
    server = start_server(args, source, root, "--weight-transfer.type", "collective")
    config = CollectiveTransferConfig(port=free_port("127.0.0.1"))
    sender = CollectiveSender(config, run, model, world, request_timeout_s=120)
    try:
        return [collective_update(server, sender, run, s) for s in range(1, args.repeats + 2)]
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--port", type=int, default=8391)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rl-transfer-bench-"))
    source, world, model = trainer_model(args.dtype)
    files = bench_filesystem(args, root / "filesystem", source, world, model)
    first, *coll = bench_collective(args, root / "collective", source, world, model)
    fs_s, coll_s = statistics.median(files), statistics.median(coll)
    rows = [
        ("filesystem: write folder + reload", f"{fs_s:.2f} s", f"median of {len(files)}"),
        ("collective: first update (joins group)", f"{first:.2f} s", "once per trainer start"),
        ("collective: later updates", f"{coll_s:.2f} s", f"median of {len(coll)}"),
        ("filesystem / collective", f"{fs_s / coll_s:.1f}x", ""),
    ]
    print_table(f"Step done -> new policy serves (default model, {args.dtype}, CPU)", rows)
    save(
        "weight_transfer",
        {
            "dtype": args.dtype,
            "filesystem_s": files,
            "collective_first_s": first,
            "collective_s": coll,
        },
    )
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
