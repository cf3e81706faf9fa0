"""A process's measured peak (launcher/eta.py): the trainer's is its high-water mark, so a peak
that lasts between two samples (a part of a training step) is not missed; the others' are what
they hold when sampled. Measured on this test's own process: real memory, no child."""

import os

import pytest

from launcher import eta
from rlcore.processes.procs import high_water_bytes

MIB = 2**20


def test_a_peak_between_two_samples_is_kept_by_the_high_water_mark():
    me = os.getpid()
    above = high_water_bytes(me)
    assert above >= 0
    # past the process's resident peak by 192 MiB, touched (bytearray zero-fills), then freed
    block = bytearray(above + 192 * MIB)
    del block
    held, peak = eta.tree_memory(me), eta.tree_memory(me, peak=True)
    assert high_water_bytes(me) >= 160 * MIB
    assert peak - held >= 160 * MIB


def test_a_process_that_is_gone_holds_nothing():
    assert high_water_bytes(2**22 + 1) == 0  # above the kernel's pid_max
    assert eta.tree_memory(2**22 + 1, peak=True) == 0


@pytest.mark.parametrize("name, peak", [("trainer", True), ("inference", False)])
def test_only_the_trainer_is_measured_at_its_high_water_mark(monkeypatch, name, peak):
    asked = []
    monkeypatch.setattr(eta, "tree_memory", lambda pid, peak=False: asked.append(peak) or 7)
    clock = eta.RunClock(None, 4, [name])
    clock.sample_memory({name: os.getpid()})
    assert asked == [peak] and clock.peaks == {name: 7}
