"""The one logging setup every process uses: `<component>: message` lines, flushed line by line
so that a log file (under `rl`) always holds whole lines, at the configured level, with every
secret free text can show as `***` (rlcore.secrets.redact_text: URLs' secrets, secret flags'
values, `NAME=value` assignments, Authorization headers), in an uncaught exception's traceback
too: a library's error quoting the user's input is written redacted."""

import faulthandler
import io
import logging
import signal
import sys
import traceback
from typing import TextIO

from rlcore.secrets import redact_text

STACK_DUMP_SIGNAL = signal.SIGUSR1
"""`rl` sends it to a stalled component, which writes the stacks of all its threads to its log."""

# Libraries that log every request or load at INFO; they keep their warnings.
NOISY_LIBRARIES = ("verifiers", "httpx", "datasets")


class RedactingFormatter(logging.Formatter):
    """A formatter whose lines (tracebacks included) show no secret (`redact_text`)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact_text(super().format(record))


def print_redacted_traceback(kind, error, tb) -> None:
    """sys.excepthook: Python's traceback, with no secret in it (`redact_text`)."""
    sys.stderr.write(redact_text("".join(traceback.format_exception(kind, error, tb))))


def setup_logging(
    component: str, level: str = "info", stream: TextIO | None = None
) -> logging.Logger:
    """Configure and return the logger named `component` (stdout unless `stream` is given)."""
    stream = stream or sys.stdout
    if hasattr(stream, "reconfigure"):
        stream.reconfigure(line_buffering=True)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter(f"{component}: %(message)s"))
    logger = logging.getLogger(component)
    logger.handlers[:] = [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    sys.excepthook = print_redacted_traceback
    for name in NOISY_LIBRARIES:
        logging.getLogger(name).setLevel(max(logging.WARNING, logger.level))
    try:
        faulthandler.register(STACK_DUMP_SIGNAL, file=sys.stderr, all_threads=True)
    except (AttributeError, ValueError, io.UnsupportedOperation):
        pass  # stderr is not a real file (captured in-process): no stack dumps on request
    return logger
