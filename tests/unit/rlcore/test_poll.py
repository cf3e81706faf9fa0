"""The one poll loop and the stop request: a deadline names what was waited for; a stop signal
is only recorded by its handler (it never raises into whatever code runs at that instant) and
every wait raises it within a tick."""

import asyncio
import os
import signal
import time

import pytest

from rlcore.processes import poll


@pytest.fixture
def stop_handlers(monkeypatch):
    """The stop handlers installed for the test; the process's own handlers back afterwards."""
    before = {sig: signal.getsignal(sig) for sig in poll.STOP_SIGNALS}
    monkeypatch.setattr(poll, "_received", [])
    poll.install_stop_handlers()
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


def test_wait_until_returns_the_first_truthy_answer():
    answers = iter([None, 0, "", "ready"])
    assert poll.wait_until(lambda: next(answers), 5, interval_s=0.01, what="x") == "ready"


def test_wait_until_asks_once_even_without_time_and_names_what_it_waited_for():
    calls = []
    with pytest.raises(TimeoutError, match=r"timed out after 0.05 s waiting for the server"):
        poll.wait_until(lambda: calls.append(1), 0.05, interval_s=0.01, what="the server")
    assert calls


def test_a_signal_is_recorded_not_raised_and_every_wait_stops_on_it(stop_handlers):
    os.kill(os.getpid(), signal.SIGINT)  # nothing raised here: the handler only records it
    assert poll.stop_requested() == signal.SIGINT
    with pytest.raises(poll.Stop) as stopped:
        poll.wait_until(lambda: False, 60, what="never")
    assert stopped.value.exit_code == 130 and str(stopped.value) == "SIGINT"
    started = time.monotonic()
    with pytest.raises(poll.Stop):
        poll.sleep(60)
    assert time.monotonic() - started < 1


def test_a_signal_during_a_long_sleep_ends_it_within_a_tick(stop_handlers):
    signal.setitimer(signal.ITIMER_REAL, 0.2)  # SIGALRM: not a stop signal, wakes nothing
    previous = signal.signal(signal.SIGALRM, lambda *_: os.kill(os.getpid(), signal.SIGTERM))
    try:
        started = time.monotonic()
        with pytest.raises(poll.Stop) as stopped:
            poll.sleep(30)
        assert stopped.value.exit_code == 143
        assert time.monotonic() - started < 1.2  # literal: the promise, not the constant
    finally:
        signal.signal(signal.SIGALRM, previous)


def test_while_stopping_a_further_signal_is_said_and_recorded(stop_handlers, capfd):
    poll.ignore_stop_signals("rl")
    os.kill(os.getpid(), signal.SIGHUP)
    assert "rl: already stopping, please wait" in capfd.readouterr().err
    assert poll.stop_requested() == signal.SIGHUP


def test_the_async_wait_takes_coroutines_and_has_the_same_deadline():
    answers = iter([False, True])

    async def ready():
        return next(answers)

    assert asyncio.run(poll.wait_until_async(ready, 5, interval_s=0.01)) is True
    with pytest.raises(TimeoutError, match="waiting for a peer"):
        asyncio.run(poll.wait_until_async(lambda: None, 0.05, 0.01, "a peer"))
