"""Slow is not stalled: a run whose trainer and inference are held to a small share of a CPU
(a cgroup, so they keep running, only slowly) finishes, although the stall limit is set far
below the time its waits take. The watchdog follows the waits the components record (the
orchestrator's rollouts awaiting completions, the weight swap it relays, the trainer's batch and
policy sends, inference receiving a collective update) to a component that works, and spares
them all (launcher/stall.py).

Every case runs a few steps of the tiny model; the first batch is generated before the cap
(its first requests build vLLM's kernels, minutes at a small share), then every later step is
slowed. The default run keeps the collective case (the relay and the send are recorded waits
too); `pytest -m slow` adds the filesystem transport and LoRA."""

import json
import os
import time
from pathlib import Path

import pytest

from rlcore.runs import waits
from rlcore.runs.rundir import RunDir
from tests.integration.cpu_cap import CpuCap
from tests.integration.helpers import (
    free_port,
    kill_sessions,
    run_state,
    start_rl,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration

SHARE = 0.12
"""Of one core, for the trainer and for inference, each in its own cgroup."""
MAX_TOKENS = 40
"""Per completion: enough work that a slowed batch takes well over the stall limit."""
STALL_LIMIT_S = 5
"""`--stall-timeout-s`: below a slowed step's waits, so that a watchdog which blamed a waiter
of a working component would stop the run."""
MAX_STEPS = 3
LORA = "[trainer.lora]\nrank = 8\nalpha = 16.0\n"
CASES = {
    "collective": (("--weight-transfer.type", "collective"), ""),
    "filesystem": (("--weight-transfer.type", "filesystem"), ""),
    "lora": (("--weight-transfer.type", "filesystem"), LORA),
}
IN_DEFAULT_RUN = {"collective"}


def records(run: RunDir) -> list[dict]:
    if not run.metrics.exists():
        return []
    return [json.loads(line) for line in run.metrics.read_text().splitlines() if line.strip()]


def recorded_waits(run: RunDir) -> set[tuple[str, str, str]]:
    """(component, what, peer) of every wait open now (rlcore.runs.waits)."""
    found = set()
    for name in ("trainer", "orchestrator", "inference"):
        for wait in waits.open_waits(waits.read(run.root, name)):
            what = "".join(c if not c.isdigit() else "#" for c in wait["waiting_for"])
            found.add((name, what, wait["peer"]))
    return found


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=() if c in IN_DEFAULT_RUN else pytest.mark.slow) for c in CASES],
)
def test_a_run_held_to_a_small_cpu_share_finishes(tiny_model_dir, tmp_path, case):
    caps = {}
    try:
        for name in ("trainer", "inference"):
            caps[name], why = CpuCap.create(f"rl-test-slow-{os.getpid()}-{name}", SHARE)
            if caps[name] is None:
                pytest.skip(why)
        run_held(tiny_model_dir, tmp_path, case, caps)
    finally:
        for cap in caps.values():
            if cap is not None:
                cap.remove()


def run_held(tiny_model_dir: Path, tmp_path: Path, case: str, caps: dict[str, CpuCap]) -> None:
    flags, extra = CASES[case]
    out, config, log = tmp_path / "run", tmp_path / "rl.toml", tmp_path / "rl.log"
    text = tiny_rl_toml(tiny_model_dir, out, free_port(), MAX_STEPS)
    text = text.replace("max_tokens = 8", f"max_tokens = {MAX_TOKENS}")
    config.write_text(text + extra)
    run = RunDir(out)
    started = time.monotonic()
    rl = start_rl(config, *flags, "--stall-timeout-s", str(STALL_LIMIT_S), log=log)
    seen: set[tuple[str, str, str]] = set()
    try:
        warm = lambda: any(r["component"] == "orchestrator" for r in records(run))  # noqa: E731
        wait_for(warm, 600, "the first batch", proc=rl, log=log)
        capped_at = time.monotonic()
        pids = run_state(out)["pids"]
        while rl.poll() is None:
            for name, cap in caps.items():
                cap.hold(pids[name])
            seen |= recorded_waits(run)
            time.sleep(0.2)
        throttled = {name: cap.throttled() for name, cap in caps.items()}
    finally:
        kill_sessions({rl.pid, *run_state(out).get("pids", {}).values()})
    text = log.read_text()
    capped_s, total_s = time.monotonic() - capped_at, time.monotonic() - started
    print(
        f"{case}: {total_s:.0f} s in all, {capped_s:.0f} s held to {SHARE} of a core "
        f"({throttled} periods throttled); waits seen: {sorted(seen)}"
    )
    assert rl.returncode == 0, text
    assert all(throttled.values()), throttled  # the caps bit
    # The limit bit too: a component went longer than it without a record.
    gaps = {}
    for name in ("trainer", "orchestrator"):
        times = sorted(r["time"] for r in records(run) if r["component"] == name)
        gaps[name] = max(b - a for a, b in zip(times, times[1:], strict=False))
    print(f"{case}: longest gaps between records {gaps}")
    assert max(gaps.values()) > STALL_LIMIT_S, gaps
    assert ("orchestrator", "completions for the rollouts in flight", "inference") in seen
    assert any(who == "trainer" and on == "orchestrator" for who, _, on in seen), seen
