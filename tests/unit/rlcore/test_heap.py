"""rlcore.processes.heap: freed heap memory goes back to the system when asked (the trainer after
its passes and steps, the inference engine after each weight update), and so do the resident pages
of shared libraries (each process once it has started)."""

import ctypes
import mmap
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlcore.processes import heap

no_trim = pytest.mark.skipif(heap.MALLOC_TRIM is None, reason="no malloc_trim (not glibc)")


def resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


@no_trim
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


def mapping_rss_kib(address: int) -> int:
    """Resident KiB of this process's mapping that starts at `address`."""
    inside = False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            head = line.split(maxsplit=1)[0]
            if "-" in head and ":" not in head:
                inside = int(head.split("-")[0], 16) == address
            elif inside and head == "Rss:":
                return int(line.split()[1])
    raise AssertionError(f"no mapping at {address:#x}")


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="no /proc (not Linux)")
def test_page_out_libraries_reclaims_a_library_mapping_and_keeps_its_bytes(tmp_path):
    """A read-only mapping of a `.so` file of our own (no other process maps it), every page
    touched: after the call its pages are no longer resident, and reading it again gives the
    same bytes."""
    library = tmp_path / "libpaged.so.1"
    content = os.urandom(8 << 20)
    library.write_bytes(content)
    with open(library, "rb") as file:
        mapped = mmap.mmap(file.fileno(), 0, prot=mmap.PROT_READ)
    try:
        view = memoryview(mapped)
        address = mapping_address(library)
        assert bytes(view[::4096]) == content[::4096]  # touch every page
        before = mapping_rss_kib(address)
        advised = heap.page_out_libraries()
        if advised == 0:
            pytest.skip("madvise(MADV_PAGEOUT) unavailable (kernel before 5.4)")
        after = mapping_rss_kib(address)
        assert before >= 8000 and after < before / 4, (before, after)
        assert bytes(view) == content
        view.release()
    finally:
        mapped.close()


def mapping_address(path) -> int:
    with open("/proc/self/maps") as maps:
        for line in maps:
            if line.rstrip().endswith(str(path)):
                return int(line.split("-")[0], 16)
    raise AssertionError(f"{path} is not mapped")


PERMS = st.sampled_from(["r--p", "r-xp", "rw-p", "r--s", "rwxp", "---p"])
NAMES = st.sampled_from(
    [
        "/usr/lib/libc.so.6",
        "/x/site-packages/torch/lib/libtorch_cpu.so",
        "/x/model.safetensors",
        "/x/lib.so.d/data.bin",
        "[heap]",
        "[vdso]",
        "",
        "/x/libz.so (deleted)",
        "/x/_C.abi3.so",
    ]
)


LIBRARY_NAME = re.compile(r"\.so(\.[0-9][0-9.]*)?$")


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(1, 2**20), PERMS, NAMES)))
def test_library_ranges_keeps_read_only_libraries_only(entries):
    """Of a process's mappings: read-only (no `w`) mappings of files named like a shared
    library (`.so`, `.so.6`); never writable ones, data files, anonymous or deleted mappings."""
    mappings = [
        (f"{start * 4096:x}-{(start + pages) * 4096:x}", perms, name)
        for start, pages, perms, name in entries
    ]
    expected = [
        (start * 4096, pages * 4096)
        for start, pages, perms, name in entries
        if perms[1] == "-" and name.startswith("/") and LIBRARY_NAME.search(name)
    ]
    assert heap.library_ranges(mappings) == expected


def test_bound_kernel_caches_sets_the_bounds_and_keeps_a_users(monkeypatch):
    monkeypatch.delenv("LRU_CACHE_CAPACITY", raising=False)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "1024")
    heap.bound_kernel_caches()
    assert os.environ["LRU_CACHE_CAPACITY"] == heap.KERNEL_CACHES["LRU_CACHE_CAPACITY"]
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "1024"  # the user's value wins
