"""The collective transport's contract (`weight_transfer.type = "collective"`), defined once
for the three processes.

Who does what for policy n (the trainer is rank 0 of one group that every inference worker
joins; the group is made at the first update after a trainer start):

  trainer       after step n writes `transfer/offer.json` {step, group, update_info} and waits
                (every rank) for `transfer/request.json` to ask for step >= n, or for
                `transfer/done`; then sends the policy, bucket by bucket.
  orchestrator  sees the offer of this attempt's trainer (the offer's stamp, rlcore.runs.attempt;
                never its age), writes request.json, POSTs
                /update_weights {step, group, rank_offset, update_info} to every server and
                returns once all answered: step n serves everywhere. At its end it writes
                `transfer/done` naming the group, so a trainer offering a policy no one
                will ask for goes on.
  inference     pauses generation (in-flight requests kept or finished: weights.pause_mode),
                joins the group if it is a new one, receives the buckets into the model
                through vLLM's weight-transfer engine (`gloo` here, vLLM's own `nccl` on GPUs),
                resumes generation and answers.

Every wait has a timeout (`CollectiveTransferConfig.update_timeout_s`); a peer that dies in
the middle of an update makes the others' collective fail at once (the connection closes).

Wire format (gloo): the update's tensors, in `update_info` order, cut into buckets of at most
`bucket_bytes` (`plan_buckets`; a larger tensor travels alone); each bucket is one broadcast
of the tensors' bytes back to back. Both sides derive the cut from `update_info`.

Light module: the standard library only; torch is imported inside the functions that need it.
"""

import json
import math
import socket
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from rlcore.files.atomic import atomic_write_text
from rlcore.files.readback import SMALL, Damaged, read_object
from rlcore.host.machine import DTYPE_BYTES
from rlcore.processes.poll import wait_until
from rlcore.runs import attempt

OFFER = "offer.json"
REQUEST = "request.json"
DONE = "done"
POLL_S = 0.05


def new_group(
    host: str, port: int, backend: str, num_workers: int, timeout_s: float, bucket_bytes: int
) -> dict[str, Any]:
    """The group a trainer start makes: `id` tells it from an earlier start's."""
    return {
        "id": uuid.uuid4().hex[:12],
        "backend": backend,
        "host": host,
        "port": port,
        "world_size": 1 + num_workers,
        "timeout_s": timeout_s,
        "bucket_bytes": bucket_bytes,
    }


def reach_group(host: str, port: int, timeout_s: float) -> None:
    """Return once the trainer's group answers at host:port (TCP; a refused connection is
    tried again: the trainer opens the port when first asked for a policy); a ConnectionError
    naming this node, the address and the fix when `host` does not resolve here, or nothing
    answers within `timeout_s` (instead of waiting out the group's timeout inside gloo)."""
    node = socket.gethostname()
    fix = (
        "every inference node must reach trainer rank 0 there: under SLURM leave "
        "weight_transfer.host unset (rl takes the first trainer node's address), else set "
        f"--weight-transfer.host to an address of the trainer's machine that every node "
        f"reaches, and let TCP port {port} through between the nodes"
    )
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as err:
        raise ConnectionError(
            f"node {node} cannot resolve weight_transfer.host {host!r} ({err}): {fix}"
        ) from None
    deadline = time.monotonic() + timeout_s  # no connection attempt outlasts it
    failed: list[OSError] = []

    def answers() -> bool:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host, port), timeout=max(0.1, min(10.0, left))):
                return True
        except OSError as err:
            failed.append(err)
            return False

    try:
        wait_until(answers, timeout_s, 0.5, f"the trainer's group at {host}:{port}")
    except TimeoutError:
        raise ConnectionError(
            f"node {node} cannot reach the trainer's weight-transfer group at "
            f"{host}:{port} within {timeout_s:g} s ({failed[-1]}): {fix}"
        ) from None


def answer_timeout_s(request: dict[str, Any]) -> float:
    """How long an inference server may take to answer one update: joining the group,
    receiving and finishing, each up to the group's timeout, and a pause for the requests in
    flight."""
    return 3 * float(request["group"]["timeout_s"]) + 120.0


LINK_FILE = "collective_link.json"
"""In the run's `state/`: the link speed the trainer measured on its last send (bytes/s)."""


def record_link_speed(run_root: Path, num_bytes: int, seconds: float) -> float:
    """Keep the speed of a send of `num_bytes` that took `seconds`; returns it (bytes/s)."""
    speed = num_bytes / max(seconds, 1e-6)
    path = run_root / "state" / LINK_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"bytes_per_s": speed, "bytes": num_bytes}) + "\n")
    return speed


def read_link_speed(run_root: Path) -> float | None:
    """The link speed an earlier send of this run measured (bytes/s), if any."""
    found = read_json(run_root / "state" / LINK_FILE)
    speed = found.get("bytes_per_s") if isinstance(found, dict) else None
    return float(speed) if isinstance(speed, int | float) and speed > 0 else None


def worker_init_info(group: dict[str, Any], rank_offset: int) -> dict[str, Any]:
    """What vLLM's `init_weight_transfer_engine` takes on a server whose first worker is group
    rank `rank_offset`: our gloo engine's fields, or vLLM's nccl engine's (packed buckets)."""
    info = {
        "master_address": group["host"],
        "master_port": group["port"],
        "rank_offset": rank_offset,
        "world_size": group["world_size"],
    }
    if group["backend"] == "nccl":
        return info | {"packed": True, "packed_buffer_size_bytes": group["bucket_bytes"]}
    return info | {
        "group_id": group["id"],
        "timeout_s": group["timeout_s"],
        "bucket_bytes": group["bucket_bytes"],
    }


def tensor_bytes(dtype_name: str, shape: list[int]) -> int:
    return DTYPE_BYTES[dtype_name] * math.prod(shape)


def plan_buckets(sizes: list[int], bucket_bytes: int) -> list[range]:
    """Consecutive index ranges of `sizes` whose sum stays within `bucket_bytes` (a tensor
    larger than that forms a bucket alone)."""
    buckets, start, total = [], 0, 0
    for index, size in enumerate(sizes):
        if index > start and total + size > bucket_bytes:
            buckets.append(range(start, index))
            start, total = index, 0
        total += size
    if start < len(sizes):
        buckets.append(range(start, len(sizes)))
    return buckets


def update_sizes(update_info: dict[str, Any]) -> list[int]:
    """Bytes of each tensor an update sends."""
    pairs = zip(update_info["dtype_names"], update_info["shapes"], strict=True)
    return [tensor_bytes(dtype, shape) for dtype, shape in pairs]


def update_buckets(update_info: dict[str, Any], bucket_bytes: int) -> list[range]:
    return plan_buckets(update_sizes(update_info), bucket_bytes)


def gloo_group(host: str, port: int, rank: int, world_size: int, group_id: str, timeout_s: float):
    """Join (rank 0: host) the gloo group `group_id` at host:port; returns (store, group), both
    to be kept alive. Blocks until all `world_size` ranks joined, up to `timeout_s`."""
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(
        host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False
    )
    # torch's stubs name the Gloo backend's options `Options`: at run time that is another class
    options = dist.ProcessGroupGloo._Options()  # type: ignore[attr-defined]
    options._timeout = timeout
    loopback = host in ("127.0.0.1", "localhost", "::1")
    device = (
        dist.ProcessGroupGloo.create_device(hostname=host)
        if loopback
        else (dist.ProcessGroupGloo.create_default_device())
    )
    options._devices = [device]
    group = dist.ProcessGroupGloo(dist.PrefixStore(group_id, store), rank, world_size, options)
    return store, group


def broadcast(group, tensor) -> None:
    """Gloo broadcast of `tensor` from rank 0, waited for (raises when a peer is gone)."""
    import torch.distributed as dist

    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = 0, 0
    group.broadcast([tensor], options).wait()


# -- the signal files in <run>/transfer/


def write_offer(folder: Path, step: int, group: dict, update_info: dict) -> None:
    """The offer carries its writer's stamp (rlcore.runs.attempt): an earlier attempt's offer is
    told from this one's by identity."""
    folder.mkdir(parents=True, exist_ok=True)
    offer = {"step": step, "stamp": attempt.stamp(), "group": group, "update_info": update_info}
    atomic_write_text(folder / OFFER, json.dumps(offer))


def read_offer(folder: Path) -> dict[str, Any] | None:
    return read_json(folder / OFFER)


def write_request(folder: Path, step: int, group_id: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / REQUEST, json.dumps({"step": step, "group": group_id}))


def read_request(folder: Path, group_id: str) -> int | None:
    """The step the orchestrator last asked this group for (None: nothing asked yet)."""
    request = read_json(folder / REQUEST)
    if request is None or request.get("group") != group_id:
        return None
    return request["step"]


def mark_done(folder: Path, group_id: str | None) -> None:
    """The orchestrator asks for no more policies: `group_id` is the group of the last offer it
    saw (None: none), so a later trainer start's group is not told it is done."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / DONE, json.dumps({"group": group_id, "stamp": attempt.stamp()}))


def is_done(folder: Path, group_id: str, filter_: "attempt.AttemptFilter") -> bool:
    """Whether the orchestrator said it asks for no more policies of `group_id`'s trainer: the
    group's own `done`, or one of this attempt's written before any offer was seen."""
    done = read_json(folder / DONE)
    if done is None:
        return False
    if done.get("group") is not None:
        return done["group"] == group_id
    return filter_.current(done.get("stamp"))


def read_json(path: Path) -> dict[str, Any] | None:
    """A transfer file's object read back bounded (rlcore.files.readback); None when there is none
    or it is not a small JSON object (a damaged one is no offer, request or `done`)."""
    try:
        return read_object(path, SMALL)
    except (FileNotFoundError, Damaged):
        return None
