"""What an offline W&B run recorded, read from its `run-<id>.wandb` file as `wandb sync` would
upload it: the file is a 7-byte header, then protobuf `Record`s framed as in a LevelDB log
(32 KiB blocks; each piece has a 4-byte checksum, a 2-byte length and a 1-byte type)."""

import json
import struct
from pathlib import Path

BLOCK, PIECE_HEADER, FILE_HEADER = 32768, 7, 7
FULL, LAST = 1, 4


def history(run_file: Path) -> list[dict]:
    """Every row logged into the run (`run.log`), in order, as {key: value}."""
    from wandb.proto import wandb_internal_pb2

    data, pos, pending, rows = run_file.read_bytes(), FILE_HEADER, b"", []
    assert data[:4] == b":W&B", f"{run_file} is not a W&B run file"
    while pos + PIECE_HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < PIECE_HEADER:  # a block's tail too short for a piece: padding
            pos += left
            continue
        length, kind = struct.unpack_from("<HB", data, pos + 4)
        pending += data[pos + PIECE_HEADER : pos + PIECE_HEADER + length]
        pos += PIECE_HEADER + length
        if kind not in (FULL, LAST):
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending)
        pending = b""
        if record.HasField("history"):
            items = record.history.item
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return rows


def offline_history(run_root: Path) -> list[dict]:
    """The rows of every offline W&B run under a run folder, oldest run first."""
    files = sorted(run_root.glob("wandb/offline-run-*/run-*.wandb"), key=lambda p: p.parent.name)
    return [row for file in files for row in history(file)]
