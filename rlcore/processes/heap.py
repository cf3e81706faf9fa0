"""Handing memory a process no longer uses back to the system.

`trim()`: glibc keeps freed memory in its heaps for reuse, so a process that frees a large
working set (a trainer step's activations, an inference engine's old prepacked weights after an
update) stays at its high-water mark. `trim()` returns those pages (glibc's `malloc_trim`); it
is a no-op where the C library has no `malloc_trim` (musl, macOS).

`page_out_libraries()`: importing torch, vLLM and triton maps hundreds of MiB of shared
libraries, and loading them leaves much of that resident in the process though it never runs
again: on a CPU machine, the CUDA build of torch (the one PyPI serves) brings cuBLASLt, nvrtc
and nvJitLink, vLLM brings triton. Measured on the quick start: 185 MiB of library pages in the
inference server, 165 in the trainer, 51 in the orchestrator. This asks the kernel to reclaim
the read-only pages of every mapped shared library (`madvise(MADV_PAGEOUT)`, Linux 5.4+): they
are clean copies of files, so nothing is lost, and a page that runs again is read back on its
first touch (in the inference server, 4 of 264 MiB came back over a round of requests). Call it
once a process has started up; a no-op where the kernel or C library lacks it.

`bound_kernel_caches()`: torch's CPU matmuls in bf16 go through oneDNN, which compiles kernels
for each matrix shape and keeps them in two caches (ideep's, `LRU_CACHE_CAPACITY`, and
oneDNN's, `ONEDNN_PRIMITIVE_CACHE_CAPACITY`, 1024 entries each). A trainer's passes hold
different numbers of tokens from step to step, so each step added a set of kernels for good:
on SmolLM2-135M's shapes (forward and backward of each projection) 9 MiB per new token count,
+518 MiB after 60 passes of random lengths, +38 with the bounds below, at the same speed
(benchmarks/kernel_caches.py). Call it before the process's first matmul; a variable the user
set wins."""

import ctypes
import errno
import os
import sys
from pathlib import Path

import psutil

from rlcore.processes import procs

MADV_PAGEOUT = 21
KERNEL_CACHES = {"LRU_CACHE_CAPACITY": "16", "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"}


def _libc():
    try:  # the symbols already loaded into this process, libc's among them
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


LIBC = _libc()
MALLOC_TRIM = getattr(LIBC, "malloc_trim", None)
MADVISE = getattr(LIBC, "madvise", None)
if MADVISE is not None:
    MADVISE.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


def trim() -> bool:
    """Return the heaps' free pages to the system; False where that is not available."""
    if MALLOC_TRIM is None:
        return False
    MALLOC_TRIM(0)
    return True


def library_ranges(mappings: list[tuple[str, str, str]]) -> list[tuple[int, int]]:
    """(start, length) of each read-only mapping of a shared library among `mappings` (as
    rlcore.processes.procs.own_mappings gives them): code and constants, never data a process
    wrote."""
    ranges = []
    for addresses, perms, path in mappings:
        if "w" in perms or not is_library(path):
            continue
        start, end = (int(x, 16) for x in addresses.split("-"))
        ranges.append((start, end - start))
    return ranges


def is_library(path: str) -> bool:
    name = Path(path.strip()).name
    return path.startswith("/") and (name.endswith(".so") or ".so." in name)


def page_out_libraries() -> int:
    """Ask the kernel to reclaim this process's resident shared-library pages; returns the
    bytes advised (0 where that is not available)."""
    if MADVISE is None or not sys.platform.startswith("linux"):
        return 0
    try:
        mappings = procs.own_mappings()
    except (OSError, psutil.Error):
        return 0
    advised = 0
    for start, length in library_ranges(mappings):
        if MADVISE(start, length, MADV_PAGEOUT) == 0:
            advised += length
        elif ctypes.get_errno() == errno.EINVAL:
            return advised  # a kernel before 5.4: nothing to gain
        # else ENOMEM: unmapped since the maps were read (a library unloaded); go on
    return advised


def bound_kernel_caches() -> None:
    """Bound oneDNN's per-shape kernel caches in this process and those it starts (read at
    their first use, so call before the first matmul)."""
    for name, capacity in KERNEL_CACHES.items():
        os.environ.setdefault(name, capacity)
