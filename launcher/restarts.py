"""When a failed attempt is started again: the one restart policy of `rl` (launch.py) and `rl
sft` (sft_run.py).

An attempt that succeeded, stopped on a full disk (a restart would fill it again) or was stopped
by a signal is final. Any other failure restarts from the run's latest complete checkpoint, up
to `max_restarts` times, after a pause that grows with each restart (BACKOFF_S per restart, at
most MAX_BACKOFF_S: what failed, a GPU's memory still being freed or a busy file system, gets
time, and a Ctrl-C in it ends the run). Two failures with no new checkpoint between them stop
for good: the attempt would fail the same way again.
"""

import sys
from collections.abc import Callable

from rlcore.files.disk_full import DISK_FULL_EXIT_CODE
from rlcore.processes import poll
from rlcore.processes.poll import Stop, install_stop_handlers
from rlcore.runs.rundir import RunDir

BACKOFF_S = 5.0
MAX_BACKOFF_S = 30.0

Attempt = Callable[[int | None], tuple[int, bool]]
"""One attempt resuming from a step (None: from the start): (exit code, whether a stop request
ended it)."""


def with_restarts(
    attempt: Attempt,
    step: int | None,
    run: RunDir,
    max_restarts: int,
    who: str,
    before_restart: Callable[[int | None], None] = lambda step: None,
) -> int:
    """Run `attempt` from `step`, then again after each failure as the policy above says; the
    last attempt's exit code, or the stop's when a signal ends a pause. `who` ("rl", "rl sft")
    starts each line printed; `before_restart(step)` runs just before an attempt that restarts
    from `step` (rl drops the batches and weights newer than it)."""
    failed_from: list[int | None] = []  # the resume step of each failed attempt
    while True:
        code, stopped = attempt(step)
        stopped = stopped or poll.stop_requested() is not None  # e.g. during a failure's stop
        if code in (0, DISK_FULL_EXIT_CODE) or stopped or len(failed_from) >= max_restarts:
            return code
        failed_from.append(step)
        step = run.latest_checkpoint()
        where = f"checkpoint step {step}" if step else "the start"
        if len(failed_from) > 1 and failed_from[-1] == step:
            at = f"step {step}" if step else "the start"
            print(f"{who}: error: failed twice at {at}; not restarting", file=sys.stderr)
            return code
        backoff_s = min(BACKOFF_S * len(failed_from), MAX_BACKOFF_S)
        print(
            f"{who}: restarting in {backoff_s:.0f} s from {where} "
            f"(restart {len(failed_from)} of {max_restarts})",
            flush=True,
        )
        install_stop_handlers()  # a stop requested since the failure, or now, ends the run
        try:
            poll.sleep(backoff_s)
        except Stop as stop:
            return stop.exit_code
        before_restart(step)
