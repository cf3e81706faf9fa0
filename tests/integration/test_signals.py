"""Ctrl-C is never lost, at any moment of a launcher's life (rlcore.processes.poll: the handler only
records the signal; every wait looks for it).

The first SIGINT during `rl`'s start-up was once dropped ("Exception ignored in ... Stop: 2"):
the handler raised, and a signal that arrives while `subprocess.Popen` forks (with a
`preexec_fn`) is handled inside logging's at-fork hook, where Python prints an exception and
drops it. A stand-in launcher that starts children without pause through the real Supervisor
gets hundreds of SIGINTs at random moments and must see every one.

Then the property on the real `rl` with the tiny model: SIGINT (sometimes twice) at a random
moment of start-up or of the run; `rl` exits 130 and every process of the run is gone within
the grace period plus a margin. A few seeds by default, more under `slow`."""

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.integration.helpers import (
    MARK_ENV,
    REPO,
    free_port,
    gone_within,
    kill_marked,
    run_state,
    tiny_rl_toml,
    wait_for,
)

pytestmark = pytest.mark.integration

STAND_IN = """
import sys
from launcher.launch import attempt_spec
from launcher.plan import Plan
from launcher.rl_config import RLConfig
from launcher.supervisor import Supervisor
from rlcore.processes import poll

given = {"output_dir": sys.argv[1], "inference": {"server": {"port": 8000}}}  # as rl settles it
plan = Plan(RLConfig.model_validate(given),
            gpu_map={"inference": [], "orchestrator": [], "trainer": []}, attempt="a1")
plan.command = lambda name: ["true"]
plan.run.claim()
supervisor = Supervisor(attempt_spec(plan))
poll.install_stop_handlers()
print("ready", flush=True)
while True:
    try:
        while True:
            poll.check_stop()
            supervisor.start("trainer").proc.wait()
    except poll.Stop as stop:
        poll._received.clear()  # seen: ready for the next one
        print(f"stopped by {stop}", flush=True)
"""
NUM_SIGNALS = 200


ANSWER_S = 10.0


def test_no_sigint_is_lost_while_the_supervisor_starts_children(tmp_path):
    launcher = subprocess.Popen(
        [sys.executable, "-c", STAND_IN, str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(x.strip()) for x in launcher.stdout], daemon=True
    ).start()
    rng = random.Random(0)
    try:
        assert lines.get(timeout=60) == "ready"
        for i in range(NUM_SIGNALS):
            time.sleep(rng.uniform(0.0, 0.02))
            launcher.send_signal(signal.SIGINT)
            try:
                answer = lines.get(timeout=ANSWER_S)
            except queue.Empty:
                answer = f"nothing in {ANSWER_S:g} s: the signal was lost"
            assert answer == "stopped by SIGINT", f"signal {i}: {answer}"
    finally:
        launcher.kill()
        launcher.wait()
    stderr = launcher.stderr.read()
    assert "Exception ignored" not in stderr, stderr[-3000:]


# -- the property on rl ------------------------------------------------------------------------
GRACE_S = 10.0
MARGIN_S = 15.0
"""Beyond the grace period: rl's own last SIGKILL and reap, and a loaded 2-core machine."""
DEFAULT_SEEDS = [0, 1]
SLOW_SEEDS = list(range(2, 16))


def moment(seed: int) -> tuple[str, float, int]:
    """(anchor, delay after it in seconds, number of SIGINTs) for `seed`: the anchor is `rl`
    announcing the attempt (it then starts the components; inference takes 20-60 s to serve)
    or the run's first metrics record; a second SIGINT lands during the shutdown."""
    rng = random.Random(seed)
    kind = seed % 4
    if kind == 3:
        return "running", rng.uniform(0.0, 5.0), rng.choice([1, 2])
    delay = [0.0, rng.uniform(0.0, 1.5), rng.uniform(1.5, 30.0)][kind]
    return "starting", delay, rng.choice([1, 2])


ANCHORS = {
    "starting": lambda out, log: "rl: run directory" in log.read_text(errors="replace"),
    "running": lambda out, log: (out / "metrics.jsonl").exists(),
}


@pytest.mark.parametrize(
    "seed", [*DEFAULT_SEEDS, *(pytest.param(s, marks=pytest.mark.slow) for s in SLOW_SEEDS)]
)
def test_sigint_at_a_random_moment_stops_everything_within_the_grace_period(
    tiny_model_dir, tmp_path, seed
):
    anchor, delay_s, count = moment(seed)
    out, config, log = tmp_path / "run", tmp_path / "rl.toml", tmp_path / "rl.log"
    config.write_text(tiny_rl_toml(tiny_model_dir, out, free_port(), max_steps=50))
    mark = uuid.uuid4().hex
    rl = subprocess.Popen(
        [sys.executable, "-m", "launcher.rl", "@", str(config), "--shutdown-grace-s", str(GRACE_S)],
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, MARK_ENV: mark},
    )
    try:
        wait_for(lambda: ANCHORS[anchor](out, log), 600, anchor, interval_s=0.02, proc=rl, log=log)
        time.sleep(delay_s)
        assert rl.poll() is None, log.read_text()
        sent = time.monotonic()
        for _ in range(count):
            rl.send_signal(signal.SIGINT)
            time.sleep(0.3)
        code = rl.wait(timeout=GRACE_S + MARGIN_S)
        left_s = GRACE_S + MARGIN_S - (time.monotonic() - sent)
        gone_within(mark, max(0.0, left_s))
        took_s = time.monotonic() - sent
        print(
            f"seed {seed}: SIGINT x{count} {delay_s:.2f} s after {anchor}: all gone in "
            f"{took_s:.1f} s"
        )
        text = log.read_text()
        assert code == 130, text
        assert "rl: got SIGINT, stopping all components" in text, text
        assert run_state(out)["status"] == "stopped", text
    finally:
        kill_marked(mark)
