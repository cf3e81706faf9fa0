"""rlcore.faults: the hooks do nothing unless asked, and no other product module reads a
fault-injection variable."""

import asyncio
import logging
import time
from pathlib import Path

import pytest

from rlcore import faults

REPO = Path(__file__).resolve().parents[3]
PRODUCT = ("rlcore", "launcher", "trainer", "orchestrator", "inference", "environments")


def test_unset_hooks_return_at_once(monkeypatch):
    for name in (
        faults.CKPT_SAVE_DELAY_ENV,
        faults.TRAINER_HANG_ENV,
        faults.INFERENCE_HANG_ENV,
        faults.RELOAD_DELAY_ENV,
    ):
        monkeypatch.delenv(name, raising=False)
    started = time.perf_counter()
    faults.delay_before_save()
    faults.hang_at_step(1, logging.getLogger("test"))
    faults.hang_at_update(1, logging.getLogger("test"))
    asyncio.run(faults.delay_before_reload())
    assert time.perf_counter() - started < 1


def test_a_hang_fires_only_at_its_step(monkeypatch):
    monkeypatch.setenv(faults.TRAINER_HANG_ENV, "3")
    faults.hang_at_step(2, logging.getLogger("test"))  # returns: not step 3


def test_delays_are_seconds(monkeypatch):
    monkeypatch.setenv(faults.CKPT_SAVE_DELAY_ENV, "0.2")
    started = time.perf_counter()
    faults.delay_before_save()
    assert time.perf_counter() - started >= 0.2
    monkeypatch.setenv(faults.RELOAD_DELAY_ENV, "soon")
    with pytest.raises(ValueError, match="RL_FAULT_RELOAD_DELAY_S='soon'"):
        asyncio.run(faults.delay_before_reload())


def test_only_the_faults_module_reads_fault_variables():
    readers = [
        str(path.relative_to(REPO))
        for package in PRODUCT
        for path in (REPO / package).rglob("*.py")
        if "RL_FAULT_" in path.read_text() and path != REPO / "rlcore" / "faults.py"
    ]
    assert readers == []
