"""The one way to read back a file a run folder holds: what a run wrote may since have been
copied, damaged or forged, so it is data, never trusted.

Every reader here opens a regular file only (a FIFO, a device, a socket or a folder is refused
before a byte is read, and a FIFO never blocks the open), follows a link only when it stays
inside the run (`root`), reads at most a bound per kind of file (`Bound`; a tail read for logs
and metrics, which never reads a whole large file), decodes any bytes (invalid UTF-8 becomes
U+FFFD), bounds JSON's nesting depth, and says what is wrong as `Damaged`, whose text is one
line: "damaged run folder: FILE: WHY". `json_safe` makes anything read fit a JSON answer (NaN
and infinities as strings, lone surrogates replaced), and `shown` makes a name printable."""

import json
import math
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KIB, MIB = 2**10, 2**20


@dataclass(frozen=True)
class Bound:
    """How much of one kind of file is read: `max_bytes` in all (a whole-file read of a larger
    file is refused as damaged; a tail read takes the last `max_bytes`)."""

    kind: str
    max_bytes: int


RUN_JSON = Bound("run.json", 4 * MIB)
MARKER = Bound("the run marker", 64 * KIB)
STATE = Bound("a state file", 4 * MIB)
CONFIG = Bound("a config file", MIB)
SUMMARY = Bound("an eval summary", 16 * MIB)
SMALL = Bound("a small record", 64 * KIB)
LOG_TAIL = Bound("a log's tail", 64 * KIB)
METRICS = Bound("metrics.jsonl", 256 * MIB)
METRICS_TAIL = Bound("metrics.jsonl's tail", 4 * MIB)
ARCHIVE = Bound("an archive file", 256 * MIB)
JSON_DEPTH = 64
"""How deep a JSON document read back may nest (run.json's deepest entry is 4 levels down)."""
SHOWN_NAME_CHARS = 200
SURROGATE = re.compile("[\ud800-\udfff]")


class Damaged(Exception):
    """A file of a run folder that cannot be read as the kind of file it should be."""

    def __init__(self, path: Path | str, why: str):
        super().__init__(f"damaged run folder: {shown(path)}: {why}")
        self.path, self.why = Path(path), why


def shown(name: Path | str | bytes, max_chars: int = SHOWN_NAME_CHARS) -> str:
    """A file name or path as text that prints anywhere: undecodable bytes (a non-UTF-8 name
    reads as surrogate escapes) become U+FFFD, control characters are escaped, and a name over
    `max_chars` is cut in the middle."""
    if isinstance(name, bytes):
        text = name.decode("utf-8", "replace")
    else:
        try:
            text = os.fsencode(str(name)).decode("utf-8", "replace")
        except UnicodeEncodeError:
            text = clean_text(str(name))
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    if len(text) > max_chars:
        half = max_chars // 2
        text = f"{text[:half]}...{text[-half:]}"
    return text


def decode(data: bytes) -> str:
    """Any bytes as text: invalid UTF-8 becomes U+FFFD, never an error."""
    return data.decode("utf-8", "replace")


def open_file(path: Path, root: Path | None = None) -> int:
    """A read-only descriptor of `path`, proved a regular file. A link is followed only when
    `root` is given and its target lies inside `root`'s real location, and with `root` no folder
    on the way may lead out of it either; a FIFO is opened without
    blocking and refused, as is a device, a socket or a folder. Damaged otherwise; FileNotFound
    where nothing is there."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        is_link = path.is_symlink()
    except (OSError, ValueError) as err:
        raise Damaged(path, f"cannot be looked at ({err.__class__.__name__})") from None
    if is_link:
        check_link(path, root)
    else:
        flags |= os.O_NOFOLLOW
        check_folder(path, root)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as err:
        raise Damaged(path, f"cannot be opened ({os_reason(err)})") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as err:
        os.close(fd)
        raise Damaged(path, f"cannot be looked at ({os_reason(err)})") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Damaged(path, f"is {kind_of(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def check_link(path: Path, root: Path | None) -> None:
    """Damaged unless the link `path` points at something inside `root`."""
    if root is None:
        raise Damaged(path, "is a link, and the file is read only as itself")
    try:
        real, real_root = path.resolve(strict=True), root.resolve()
    except FileNotFoundError:
        raise Damaged(path, "is a link to nothing") from None
    except (OSError, RuntimeError, ValueError) as err:
        why = f"is a link that cannot be followed ({err.__class__.__name__})"
        raise Damaged(path, why) from None
    if not real.is_relative_to(real_root):
        raise Damaged(path, f"is a link out of the run (to {shown(real)})")


def check_folder(path: Path, root: Path | None) -> None:
    """Damaged when a folder on the way from `root` to `path` is a link out of `root` (the run's
    `logs/` linked to another folder)."""
    if root is None:
        return
    try:
        real, real_root = path.parent.resolve(), root.resolve()
    except (OSError, RuntimeError, ValueError) as err:
        raise Damaged(path, f"its folder cannot be followed ({err.__class__.__name__})") from None
    if not real.is_relative_to(real_root):
        raise Damaged(path, f"lies in a folder linked out of the run (to {shown(real)})")


def kind_of(mode: int) -> str:
    for test, words in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return words
    return "not a regular file"


def os_reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or err.__class__.__name__


def read_bytes(path: Path, bound: Bound, root: Path | None = None) -> bytes:
    """The whole of `path`; Damaged when it holds more than `bound` allows."""
    fd = open_file(path, root)
    try:
        size = os.fstat(fd).st_size
        if size > bound.max_bytes:
            raise Damaged(
                path, f"{size:,} bytes, over the {bound.max_bytes:,}-byte bound for {bound.kind}"
            )
        data = read_at_most(fd, bound.max_bytes + 1, path)
    finally:
        os.close(fd)
    if len(data) > bound.max_bytes:  # it grew while read
        raise Damaged(path, f"over the {bound.max_bytes:,}-byte bound for {bound.kind}")
    return data


def read_at_most(fd: int, limit: int, path: Path) -> bytes:
    chunks, left = [], limit
    while left > 0:
        try:
            chunk = os.read(fd, min(left, MIB))
        except OSError as err:
            raise Damaged(path, f"read failed ({os_reason(err)})") from None
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_text(path: Path, bound: Bound, root: Path | None = None) -> str:
    """`read_bytes` decoded (invalid UTF-8 replaced)."""
    return decode(read_bytes(path, bound, root))


def read_tail(path: Path, bound: Bound, root: Path | None = None) -> tuple[bytes, int]:
    """The last `bound.max_bytes` of `path`, and the offset they start at (0: the whole file)."""
    fd = open_file(path, root)
    try:
        size = os.fstat(fd).st_size
        start = max(0, size - bound.max_bytes)
        os.lseek(fd, start, os.SEEK_SET)
        return read_at_most(fd, bound.max_bytes, path), start
    finally:
        os.close(fd)


def read_from(path: Path, offset: int, bound: Bound, root: Path | None = None) -> bytes:
    """At most `bound.max_bytes` of `path` from byte `offset` on."""
    fd = open_file(path, root)
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        return read_at_most(fd, bound.max_bytes, path)
    finally:
        os.close(fd)


def parse_json(data: bytes | str, where: Path | str, depth: int = JSON_DEPTH) -> Any:
    """A JSON document read back: Damaged when it does not parse or nests deeper than
    `depth`. NaN and infinities parse as floats (json_safe turns them back into words)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise Damaged(where, f"JSON nested deeper than {depth} levels") from None
    except (ValueError, TypeError) as err:
        raise Damaged(where, f"not JSON ({json_error(err)})") from None
    if nesting(value, depth) > depth:
        raise Damaged(where, f"JSON nested deeper than {depth} levels")
    return value


def json_error(err: Exception) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"{err.msg} at line {err.lineno} column {err.colno}"
    return err.__class__.__name__


def nesting(value: Any, stop: int) -> int:
    """How deep `value` nests (a scalar 0), counted without recursion; at most stop + 1."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > stop:
            return deepest
        todo.extend((child, level + 1) for child in children)
    return deepest


def read_json(path: Path, bound: Bound, root: Path | None = None, depth: int = JSON_DEPTH) -> Any:
    """A JSON file read back, bounded in size and depth; Damaged when it is not one."""
    return parse_json(read_bytes(path, bound, root), path, depth)


def read_object(path: Path, bound: Bound, root: Path | None = None) -> dict:
    """A JSON file that must hold an object; Damaged otherwise."""
    value = read_json(path, bound, root)
    if not isinstance(value, dict):
        raise Damaged(path, f"holds a JSON {type(value).__name__}, not an object")
    return value


def read_kept(path: Path) -> dict | None:
    """A small record the program keeps in its cache (a job's answers, a machine's contention),
    read back as data it did not write: None where there is no file or the bounded reader
    refuses it (a FIFO, a huge, deep or non-UTF-8 file, no JSON object)."""
    try:
        if not path.exists():
            return None
        return read_object(path, SMALL)
    except (OSError, ValueError, Damaged):
        return None


def json_safe(value: Any, depth: int = JSON_DEPTH) -> Any:
    """`value` as strict JSON can carry it: NaN and infinities as the words "NaN", "Infinity"
    and "-Infinity", strings with lone surrogates (undecodable bytes) repaired with U+FFFD,
    keys as strings; anything nested deeper than `depth` becomes "...". Tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict | list | tuple):
        if depth <= 0:
            return "..."
        if isinstance(value, dict):
            return {clean_text(str(k)): json_safe(v, depth - 1) for k, v in value.items()}
        return [json_safe(v, depth - 1) for v in value]
    return value


def clean_text(text: str) -> str:
    """`text` with any lone surrogate replaced by U+FFFD (so it encodes as UTF-8)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return SURROGATE.sub("\ufffd", text)
