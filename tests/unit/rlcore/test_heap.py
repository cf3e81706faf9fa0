"""rlcore.heap: freed heap memory goes back to the system when asked (the trainer after its
passes and steps, the inference engine after each weight update)."""

import ctypes

import pytest

from rlcore import heap

pytestmark = pytest.mark.skipif(heap.MALLOC_TRIM is None, reason="no malloc_trim (not glibc)")


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def test_trim_returns_freed_heap_pages():
    """200 MiB in 64 KiB blocks (below glibc's mmap threshold, so on the heap), freed except
    the last one, which keeps the heap's top from shrinking by itself: only a trim gives the
    freed pages back."""
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = []
    for _ in range(3200):
        block = libc.malloc(64 << 10)
        ctypes.memset(block, 1, 64 << 10)
        blocks.append(block)
    for block in blocks[:-1]:
        libc.free(block)
    before = resident_mib()
    assert heap.trim()
    after = resident_mib()
    libc.free(blocks[-1])
    assert before - after > 150, (before, after)
