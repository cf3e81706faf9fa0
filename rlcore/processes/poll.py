"""Deadline loops, and the stop request every one of them checks.

`wait_until` (and `wait_until_async`) is the one poll loop: it asks a predicate until it
answers, gives up after its timeout with a TimeoutError that says what it waited for, and
raises `Stop` within `TICK_S` of a stop request.

A launcher (`rl`, `rl sft`) takes SIGINT, SIGTERM and SIGHUP with `install_stop_handlers`,
whose handler only records the signal and never raises. An exception raised by a signal handler
surfaces in whatever Python code runs at that instant, and where that code is a finalizer or an
at-fork hook, Python prints "Exception ignored in ..." and drops it: `subprocess.Popen` with a
`preexec_fn` runs logging's lock release in the parent after every fork, so a Ctrl-C that came
while `rl` started its components was lost, and one that came a moment later left a started
process unrecorded. The launcher's loops call `check_stop` instead (every `wait_until` and
`sleep` does) and unwind from there.
"""

import asyncio
import inspect
import os
import signal
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
STOP_EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
TICK_S = 0.1
"""The longest `sleep` and `wait_until` go without looking at the stop request."""
_received: list[int] = []
"""The stop signals received so far, in order (appended by the handler only)."""


class Stop(Exception):
    """A stop was requested by signal `signum`: raised by `check_stop`, never by a handler."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process the signal ended."""
        return STOP_EXIT_CODES.get(self.signum, 1)


def install_stop_handlers() -> None:
    """From now on SIGINT, SIGTERM and SIGHUP only request a stop (`check_stop` raises it)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _record)


def _record(signum: int, _frame: Any) -> None:
    _received.append(signum)


def stop_requested() -> int | None:
    """The first stop signal received (None: none yet)."""
    return _received[0] if _received else None


def check_stop() -> None:
    """Raise `Stop` if a stop was requested."""
    if _received:
        raise Stop(_received[0])


def ignore_stop_signals(prog: str) -> None:
    """While stopping: a further signal is recorded (so no restart follows) and said, and the
    stop goes on (said with os.write: a handler that prints can interrupt a print in progress
    and fail)."""
    message = f"{prog}: already stopping, please wait\n".encode()

    def say(signum: int, _frame: Any) -> None:
        _received.append(signum)
        try:
            os.write(2, message)
        except OSError:
            pass

    for sig in STOP_SIGNALS:
        signal.signal(sig, say)


def sleep(seconds: float) -> None:
    """`time.sleep` that raises `Stop` within TICK_S of a stop request."""
    end = time.monotonic() + seconds
    while True:
        check_stop()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(TICK_S, left))


def wait_until(
    predicate: Callable[[], T | None], timeout_s: float, interval_s: float = 0.5, what: str = "it"
) -> T:
    """Call `predicate` every `interval_s` until it returns something truthy, and return that;
    TimeoutError naming `what` after `timeout_s` (math.inf: no deadline); `Stop` on a stop
    request. The predicate is called at least once."""
    deadline = time.monotonic() + timeout_s
    while True:
        check_stop()
        value = predicate()
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(timed_out(timeout_s, what))
        sleep(min(interval_s, left))


async def wait_until_async(
    predicate: Callable[[], Any], timeout_s: float, interval_s: float = 0.5, what: str = "it"
) -> Any:
    """`wait_until` for an event loop: `predicate` may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        check_stop()
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(timed_out(timeout_s, what))
        await asyncio.sleep(min(interval_s, left))


def timed_out(timeout_s: float, what: str) -> str:
    return f"timed out after {timeout_s:g} s waiting for {what}"
