"""The one way `rl view` reaches a file: a path relative to a run (or to a folder named on the
command line), checked as given and again after resolving. Refused: an empty or absolute path,
`..`, a NUL byte, a backslash, anything still percent-encoded (`%2e%2e`, `%2f`: a request that
was encoded twice), and a path whose real location (links followed) leaves its root."""

import os
import re
from pathlib import Path

ENCODED = re.compile(r"%[0-9a-fA-F]{2}")


class Refused(Exception):
    """A path that reaches outside its root, or is malformed; the message says which."""


class Missing(Exception):
    """A path inside its root that does not exist (or is not the kind of entry wanted)."""


def check_relative(text: str) -> list[str]:
    """The parts of a relative path a request gave; Refused when it is not a plain one."""
    if not text or "\x00" in text or "\\" in text or ENCODED.search(text):
        raise Refused(f"{text!r} is not a plain relative path")
    if text.startswith("/") or os.path.isabs(text):
        raise Refused(f"{text!r} is absolute: paths are relative to a folder rl view was given")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise Refused(f"{text!r} leaves its folder (..)")
    return parts


def inside(root: Path, *parts: str, kind: str = "file") -> Path:
    """`root/parts` resolved (links followed), proved to lie inside `root`'s real location and
    to be a `kind` ("file": a regular file, "dir", or "any": whatever it is, for
    rlcore.files.readback to judge); Refused when it escapes, Missing when it is not there."""
    real_root = root.resolve()
    try:
        real = root.joinpath(*parts).resolve(strict=True)
    except FileNotFoundError:
        raise Missing(f"{'/'.join(parts)} does not exist in {root}") from None
    except (OSError, RuntimeError, ValueError) as err:
        raise Refused(f"{'/'.join(parts)}: {err.__class__.__name__}") from None
    if real != real_root and not real.is_relative_to(real_root):
        raise Refused(f"{'/'.join(parts)} leads outside {root} (a link)")
    try:
        wrong = (kind == "file" and not real.is_file()) or (kind == "dir" and not real.is_dir())
    except OSError:
        wrong = True
    if wrong:
        raise Missing(f"{'/'.join(parts)} in {root} is not a {kind}")
    return real
