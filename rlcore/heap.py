"""Handing the C heap's free pages back to the system (glibc's `malloc_trim`).

glibc keeps freed memory in its heaps for reuse, so a process that frees a large working set
(a trainer step's activations, an inference engine's old prepacked weights after an update)
stays at its high-water mark. `trim()` returns those pages; it is a no-op where the C library
has no `malloc_trim` (musl, macOS)."""

import ctypes


def _find_malloc_trim():
    try:  # the symbols already loaded into this process, libc's among them
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


MALLOC_TRIM = _find_malloc_trim()


def trim() -> bool:
    """Return the heaps' free pages to the system; False where that is not available."""
    if MALLOC_TRIM is None:
        return False
    MALLOC_TRIM(0)
    return True
