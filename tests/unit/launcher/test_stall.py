"""The stall watch (launcher.stall): a limit that follows the run's own pace, work measured from
CPU time, waits recorded by the components (several at once) and read by rl, and the blame that
follows chains of waits to their root and spares whatever works or waits on what works."""

import asyncio
import os
import sys
from contextlib import ExitStack

import pytest

from launcher import stall
from launcher.stall import Clock, View, Wait, WaitTimes, find_stall
from rlcore.runs import waits
from rlcore.runs.attempt import ATTEMPT_ENV


def test_the_limit_follows_the_longest_gap_between_records():
    clock = Clock(last_progress=0.0)
    assert clock.limit_s(None) == stall.AUTO_STARTUP_S  # nothing measured yet
    clock.record(500.0)  # the first record: startup, not a step
    assert clock.longest_gap_s == 0 and clock.limit_s(None) == stall.AUTO_FLOOR_S
    clock.record(510.0)
    clock.record(610.0)  # a slow step: 100 s
    clock.record(620.0)
    assert clock.longest_gap_s == 100.0
    assert clock.limit_s(None) == stall.AUTO_FACTOR * 100.0
    assert clock.limit_s(42.0) == 42.0  # stall_timeout_s set: a fixed limit
    assert clock.limit_s(1.0) == stall.MIN_LIMIT_S  # a whole CPU sample fits in it


def test_time_spent_waiting_on_a_peer_is_not_owed():
    """A trainer that waited 400 s for its batch and now trains is not 400 s idle (its last
    CPU sample, taken while it waited, says idle)."""
    clock = Clock(last_progress=0.0, last_work=0.0)
    clock.waiting(400.0)  # rl saw it in a recorded wait at its last check
    assert clock.last_progress == 400.0 and clock.last_work == 0.0
    clock.record(500.0)
    clock.waiting(900.0)
    clock.record(910.0)
    assert clock.longest_gap_s == 410.0  # the limit still follows the records' pace


def test_an_answer_to_health_is_progress_but_not_work():
    clock = Clock(last_progress=0.0, last_work=0.0)
    clock.alive(50.0)
    assert clock.last_progress == 50.0 and clock.last_work == 0.0
    assert not clock.progressed  # no step: the limit stays the startup one


def test_work_is_cpu_time_of_the_whole_tree_per_process(monkeypatch):
    samples = iter(
        [
            {1: 10.0, 2: 5.0},
            {1: 10.0, 2: 5.1},  # 0.1 s in 10 s: idle
            {1: 10.0, 3: 1.0},  # 2 has gone (no negative time), 3 is new: 1 s counts
            {1: 14.0, 3: 1.0},
        ]
    )
    monkeypatch.setattr(stall, "tree_cpu_s", lambda pid: next(samples))
    clock = Clock(last_progress=0.0, last_work=0.0)
    clock.sample_cpu(1, now=100.0)  # the first sample only sets the baseline
    assert clock.working is None
    clock.sample_cpu(1, now=101.0)  # too soon: not sampled
    clock.sample_cpu(1, now=110.0)
    assert clock.working is False and clock.last_progress == 0.0
    clock.sample_cpu(1, now=120.0)
    assert clock.working is True and clock.last_progress == clock.last_work == 120.0
    clock.sample_cpu(1, now=130.0)
    assert clock.working is True


def test_tree_cpu_counts_this_process():
    """(Its children too: the acceptance runs in tests/integration/test_slow_runs.py capture
    inference's engine core, a child process.)"""
    before = stall.tree_cpu_s(os.getpid())[os.getpid()]
    spent = sum(range(3_000_000))  # some CPU time of our own
    assert spent and stall.tree_cpu_s(os.getpid())[os.getpid()] > before


# -- recorded waits ----------------------------------------------------------------------------

HELD = ExitStack()
"""Waits entered by a test stay open until it ends (a dropped one would close itself)."""


def record_wait(run_root, component, what, peer, monkeypatch, attempt="a1", server=None):
    monkeypatch.setenv(ATTEMPT_ENV, attempt)
    waits.setup(run_root, component)
    return HELD.enter_context(waits.waiting(what, peer, server=server))


@pytest.fixture(autouse=True)
def fresh_board(monkeypatch):
    monkeypatch.setattr(waits, "_board", None)
    yield
    HELD.close()


def open_waits(run_root, component):
    record = waits.read(run_root, component)
    return [(w["waiting_for"], w["peer"]) for w in waits.open_waits(record)]


def test_waits_are_recorded_and_cleared(tmp_path, monkeypatch):
    record_wait(tmp_path, "trainer", "batch 3", "orchestrator", monkeypatch)
    record = waits.read(tmp_path, "trainer")
    assert open_waits(tmp_path, "trainer") == [("batch 3", "orchestrator")]
    assert record["attempt"] == "a1" and record["pid"] == os.getpid()
    HELD.close()
    assert open_waits(tmp_path, "trainer") == []
    assert WaitTimes(tmp_path, "a1", ["inference"]).current("trainer", 0.0, {"trainer"}) == []


def test_concurrent_waits_are_each_recorded(tmp_path, monkeypatch):
    """asyncio tasks each in their own waits: all are listed at once; the same wait entered
    by many (a batch's requests) is one entry until the last leaves it."""
    monkeypatch.setenv(ATTEMPT_ENV, "a1")
    waits.setup(tmp_path, "orchestrator")
    seen = []

    async def request(release: asyncio.Event) -> None:
        with waits.waiting("completions", "inference", server=0):
            await release.wait()

    async def main() -> None:
        first, second = asyncio.Event(), asyncio.Event()
        tasks = [asyncio.create_task(request(first)), asyncio.create_task(request(second))]
        with waits.waiting("policy step 2", "trainer"):
            await asyncio.sleep(0)
            seen.append(open_waits(tmp_path, "orchestrator"))
        first.set()
        await asyncio.sleep(0.01)
        seen.append(open_waits(tmp_path, "orchestrator"))  # one request still in flight
        second.set()
        await asyncio.gather(*tasks)
        seen.append(open_waits(tmp_path, "orchestrator"))

    asyncio.run(main())
    assert sorted(seen[0]) == [("completions", "inference"), ("policy step 2", "trainer")]
    assert seen[1] == [("completions", "inference")]
    assert seen[2] == []


def test_a_wait_is_timed_by_its_id(tmp_path, monkeypatch):
    record_wait(tmp_path, "orchestrator", "policy step 2", "trainer", monkeypatch)
    times = WaitTimes(tmp_path, "a1", ["inference"])
    live = {"orchestrator", "trainer"}
    assert times.current("orchestrator", 100.0, live)[0].seconds == 0.0
    assert times.current("orchestrator", 130.0, live)[0].seconds == 30.0
    HELD.close()
    HELD.enter_context(waits.waiting("policy step 2", "trainer"))  # a new wait: its own clock
    assert times.current("orchestrator", 140.0, live)[0].seconds == 0.0
    assert WaitTimes(tmp_path, "a2", []).current("orchestrator", 140.0, live) == []  # attempt


def test_waits_on_inference_name_one_server_or_all(tmp_path, monkeypatch):
    record_wait(tmp_path, "orchestrator", "completions", "inference", monkeypatch, server=1)
    HELD.enter_context(waits.waiting("inference to answer /health", "inference"))
    HELD.enter_context(waits.waiting("policy step 1", "trainer"))
    servers = ["inference", "inference-1", "inference-2"]
    live = {"orchestrator", "inference", "inference-1", "inference-2"}  # the trainer has gone
    found = WaitTimes(tmp_path, "a1", servers).current("orchestrator", 0.0, live)
    assert {w.what: w.peers for w in found} == {
        "completions": ["inference-1"],
        "inference to answer /health": servers,
        "policy step 1": [],
    }


WRITES: list[str] | None = None
"""While a list: every file opened for writing and every folder made or renamed, by path."""
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


def _record_writes(event: str, args: tuple) -> None:
    if WRITES is None:
        return
    if event == "open" and (args[2] & WRITE_FLAGS or any(c in str(args[1]) for c in "wax+")):
        WRITES.append(f"open {args[0]}")
    elif event in ("os.mkdir", "os.rename", "os.replace", "os.symlink", "os.link"):
        WRITES.append(f"{event} {args[0]}")


sys.addaudithook(_record_writes)  # for the whole session: audit hooks cannot be removed


def test_without_setup_waiting_writes_nothing(tmp_path, monkeypatch):
    """Not in the working folder (a relative path) nor anywhere else: the interpreter's audit
    events see every file opened for writing, whatever path the code chose."""
    global WRITES
    monkeypatch.chdir(tmp_path)
    WRITES = []
    try:
        with waits.waiting("batch 0", "orchestrator"):
            pass
        with waits.waiting("completions", "inference", detail="x", server=1):
            pass
        seen = WRITES
    finally:
        WRITES = None
    assert seen == [] and list(tmp_path.iterdir()) == []


# -- blame -------------------------------------------------------------------------------------
LIMIT_S = 60.0


def view(name, working=False, idle_s=0.0, waits_on=(), work_idle_s=None, **extra) -> View:
    """A component `idle_s` past its last progress; `waits_on`: (what, peers, seconds)."""
    found = [Wait(name, what, list(peers), seconds) for what, peers, seconds in waits_on]
    work_idle_s = idle_s if work_idle_s is None else work_idle_s
    owes = not name.startswith("inference")
    return View(
        name, working, idle_s, work_idle_s, LIMIT_S, waits=found, owes_progress=owes, **extra
    )


def views(*found: View) -> dict[str, View]:
    return {v.name: v for v in found}


def test_a_root_that_neither_works_nor_progresses_past_its_limit_is_stuck():
    assert find_stall(views(view("trainer", idle_s=LIMIT_S - 1))) is None
    found = find_stall(views(view("trainer", idle_s=LIMIT_S + 1)))
    assert found.name == "trainer" and "trainer has not made progress for 61 s" in found.message
    assert find_stall(views(view("trainer", working=True, idle_s=1000.0))) is None  # slow


def test_a_chain_of_waits_on_a_working_server_is_never_blamed():
    """The issue's runs: the trainer waits for a batch, the orchestrator for completions from a
    starved inference server that computes slowly; nobody has progressed for ages."""
    chain = views(
        view("trainer", idle_s=400.0, waits_on=[("batch 1", ["orchestrator"], 400.0)]),
        view("orchestrator", idle_s=400.0, waits_on=[("completions", ["inference"], 390.0)]),
        view("inference", working=True, idle_s=0.0),
    )
    assert find_stall(chain) is None
    chain["inference"].working = False  # the server stopped working: it is the one stuck
    chain["inference"].work_idle_s = LIMIT_S + 5
    found = find_stall(chain)
    assert found.name == "inference", found
    assert "inference has done no work for 65 s" in found.message
    assert "the orchestrator waits for completions from inference (390 s)" in found.message
    assert "the trainer waits for batch 1 from the orchestrator (400 s)" in found.message


def test_the_root_of_a_chain_is_blamed_not_its_waiters():
    chain = views(
        view("orchestrator", idle_s=500.0, waits_on=[("policy step 3", ["trainer"], 500.0)]),
        view("inference", idle_s=1.0, work_idle_s=500.0),  # answers /health, nobody waits on it
        view("trainer", idle_s=LIMIT_S + 10),
    )
    found = find_stall(chain)
    assert found.name == "trainer" and "orchestrator waits for policy step 3" in found.message
    chain["trainer"].idle_s = LIMIT_S - 10  # within its limit: the waiters wait
    assert find_stall(chain) is None


def test_a_working_link_anywhere_in_the_chain_spares_it():
    """The collective relay: the orchestrator waits for the swap, inference receives from the
    trainer, which sends (works)."""
    chain = views(
        view("orchestrator", idle_s=300.0, waits_on=[("the swap", ["inference"], 300.0)]),
        view("inference", idle_s=300.0, waits_on=[("policy step 2", ["trainer"], 300.0)]),
        view("trainer", working=True, idle_s=300.0),
    )
    assert find_stall(chain) is None


def test_an_idle_server_owes_work_only_while_waited_on():
    assert find_stall(views(view("inference", idle_s=1.0, work_idle_s=5000.0))) is None
    waiting = view("orchestrator", idle_s=100.0, waits_on=[("x", ["inference"], LIMIT_S - 1)])
    idle = view("inference", idle_s=1.0, work_idle_s=5000.0)
    assert find_stall(views(waiting, idle)) is None  # waited on for less than its limit


def test_a_server_silent_on_health_is_stuck_unless_it_works():
    silent = view("inference", idle_s=LIMIT_S + 1)
    found = find_stall(views(silent))
    assert found.name == "inference" and "has not answered /health for 61 s" in found.message
    silent.working = True  # busy loading a large policy with its event loop held
    assert find_stall(views(silent)) is None


def test_a_wait_on_any_working_server_spares_the_waiter():
    servers = ["inference", "inference-1"]
    trainer = view("trainer", idle_s=1000.0, waits_on=[("the send", servers, 1000.0)])
    found = views(
        trainer, view("inference", idle_s=1.0), view("inference-1", working=True, idle_s=1.0)
    )
    assert find_stall(found) is None


def test_a_wait_on_a_component_rl_cannot_see_spares_the_waiter():
    lone = view("trainer", idle_s=1000.0, waits_on=[("batch 9", [], 1000.0)])
    assert find_stall(views(lone)) is None


def test_waiting_on_each_other_is_a_deadlock_after_a_while():
    def pair(seconds: float, orchestrator_works: bool = False) -> dict[str, View]:
        return views(
            view(
                "orchestrator",
                working=orchestrator_works,
                idle_s=seconds,
                waits_on=[("policy step 3", ["trainer"], seconds)],
            ),
            view(
                "trainer",
                idle_s=seconds,
                waits_on=[("a request for policy step 3", ["orchestrator"], seconds)],
            ),
        )

    assert find_stall(pair(stall.DEADLOCK_AFTER_S - 1)) is None
    found = find_stall(pair(stall.DEADLOCK_AFTER_S))
    assert found.name == "trainer" and found.circle == ["trainer", "orchestrator"]
    assert found.message.startswith(
        "the trainer and the orchestrator are waiting for each other: the trainer for a "
        "request for policy step 3 (40 s), the orchestrator for policy step 3 (40 s)"
    )
    assert find_stall(pair(1000.0, orchestrator_works=True)) is None  # one of them works


def test_a_circle_through_a_component_seen_only_remotely_is_left_to_its_timeouts():
    def circle(observable: bool) -> dict[str, View]:
        return views(
            view("trainer", idle_s=100.0, waits_on=[("the send", ["inference"], 100.0)]),
            view(
                "inference",
                idle_s=1.0,
                waits_on=[("policy step 4", ["trainer"], 100.0)],
                observable=observable,
            ),
        )

    assert find_stall(circle(True)).circle == ["trainer", "inference"]
    assert find_stall(circle(False)) is None  # srun on another node: its CPU is not seen


def test_waiting_on_inference_is_no_deadlock():
    found = views(
        view("trainer", idle_s=1000.0, waits_on=[("batch 0", ["orchestrator"], 1000.0)]),
        view(
            "orchestrator",
            idle_s=1000.0,
            waits_on=[("inference to answer /health", ["inference"], 1000.0)],
        ),
        view("inference", working=True, idle_s=1000.0),
    )
    assert find_stall(found) is None
