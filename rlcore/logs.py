"""The one logging setup every process uses: `<component>: message` lines, flushed line by line
so that a log file (under `rl`) always holds whole lines, at the configured level."""

import faulthandler
import io
import logging
import signal
import sys
from typing import TextIO

STACK_DUMP_SIGNAL = signal.SIGUSR1
"""`rl` sends it to a stalled component, which writes the stacks of all its threads to its log."""

# Libraries that log every request or load at INFO; they keep their warnings.
NOISY_LIBRARIES = ("verifiers", "httpx", "datasets")


def setup_logging(
    component: str, level: str = "info", stream: TextIO | None = None
) -> logging.Logger:
    """Configure and return the logger named `component` (stdout unless `stream` is given)."""
    stream = stream or sys.stdout
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(line_buffering=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(f"{component}: %(message)s"))
    logger = logging.getLogger(component)
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logger.level))
    try:
        faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # stderr is not a real file (captured in-process): no stack dumps on request
    return logger
