"""Helpers for tests that run the real `rl` launcher: free ports, run configs, process checks."""

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from rlcore.host.machine import probe
from rlcore.processes.poll import wait_until

if TYPE_CHECKING:
    from rlcore.runs.rundir import RunDir

REPO = Path(__file__).resolve().parents[2]
# The admin token of the session's shared inference server (conftest.py), which the
# orchestrators run against it are given too (their run folders are not the server's).
SHARED_SERVER_TOKEN = "integration-tests-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports free on 127.0.0.1, below the ephemeral range
    (32768 up), from which any outgoing connection or `bind(0)` (vLLM's own sockets) may draw
    the port next to one `free_port` returned."""
    start = 20000 + random.randrange(0, 10000)
    for first in range(start, start + 2000):
        socks = []
        try:
            for port in range(first, first + count):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()
    raise RuntimeError(f"no {count} free ports in a row from {start}")


def tiny_rl_toml(model_dir: Path, out: Path, port: int, max_steps: int = 4, **extra: str) -> str:
    """An rl.toml for a CPU run of a tiny model on one-digit addition."""
    lines = [
        f"max_steps = {max_steps}",
        "seq_len = 256",
        f'output_dir = "{out}"',
        "async_level = 1",
        *[f"{k} = {v}" for k, v in extra.items()],
        "[model]",
        f'name = "{model_dir}"',
        "[ckpt]",
        "interval = 1",
        "[trainer.model]",
        'dtype = "float32"',
        "[inference.model]",
        'dtype = "float32"',
        "[trainer.optim]",
        "lr = 1e-4",
        "[orchestrator]",
        "batch_size = 8",
        "rollouts_per_example = 4",
        "[orchestrator.sampling]",
        "max_tokens = 8",
        "[[orchestrator.env]]",
        'id = "rl-add-digits"',
        "[inference.server]",
        f"port = {port}",
        "[inference.cpu]",
        "kvcache_space_gib = 1",
    ]
    return "\n".join(lines) + "\n"


def start_rl(config: Path, *flags: str, log: Path, env: dict | None = None) -> subprocess.Popen:
    """Start `rl @ config` in its own session, output to `log` (`env` adds variables)."""
    cmd = [sys.executable, "-m", "launcher.rl", "@", str(config), *flags]
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )


def run_state(out: Path) -> dict:
    path = out / "run.json"
    return json.loads(path.read_text()) if path.exists() else {}


def session_members(session_ids: set[int]) -> list[int]:
    """Live processes whose session is one of `session_ids` (the launcher's children each lead
    one session, so this finds them and everything they started)."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) in session_ids:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def wait_for(
    predicate, timeout_s: float, what: str, interval_s: float = 0.5, proc=None, log=None
) -> None:
    """Poll `predicate` (rlcore.processes.poll); fail at once if `proc` (e.g. rl) exits first,
    showing `log`."""

    def done() -> bool:
        if predicate():
            return True
        if proc is not None and proc.poll() is not None:
            text = Path(log).read_text()[-3000:] if log else ""
            raise AssertionError(f"exited with {proc.returncode} before {what}:\n{text}")
        return False

    wait_until(done, timeout_s, interval_s, what)


MARK_ENV = "RL_TEST_MARK"
"""A variable the tests put in a command's environment: every process it starts inherits it, so
`marked` finds them all, however they were regrouped or reparented."""


def marked(mark: str) -> list[int]:
    """Live processes (zombies left out) whose environment has MARK_ENV=`mark`."""
    found = []
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and proc.environ().get(MARK_ENV) == mark:
                found.append(proc.pid)
        except psutil.Error:
            continue
    return found


def describe(pids: list[int]) -> str:
    """`pid command` of each process, for a failed assertion's message."""
    lines = []
    for pid in pids:
        try:
            cmdline = " ".join(psutil.Process(pid).cmdline())
        except psutil.Error:
            continue
        lines.append(f"{pid} {cmdline[:160]}")
    return "\n".join(lines)


def kill_marked(mark: str) -> None:
    """Test cleanup: SIGKILL every process that carries `mark`."""
    for pid in marked(mark):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def gone_within(mark: str, timeout_s: float) -> float:
    """Seconds until no process carries `mark`; AssertionError naming the survivors when some
    are still there after `timeout_s`."""
    started = time.monotonic()
    try:
        wait_until(lambda: not marked(mark), timeout_s, 0.1, f"processes marked {mark}")
    except TimeoutError:
        raise AssertionError(f"alive {timeout_s:g} s later:\n{describe(marked(mark))}") from None
    return time.monotonic() - started


def kill_sessions(session_ids: set[int]) -> None:
    """Test cleanup: make sure nothing of a run outlives the test, whatever happened."""
    for pid in session_members(session_ids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@contextlib.contextmanager
def small_disk(folder: Path, size: str, read_only: tuple[str, ...] | None = None) -> Iterator[Path]:
    """A real file system of `size` (tmpfs, e.g. "160k", "20m") mounted on a new `folder`;
    with `read_only`, the folders named there are made in it and it is then mounted read-only.
    Where this user may not mount, the test is skipped."""
    import pytest

    folder.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        if read_only is not None:
            for name in read_only:
                (folder / name).mkdir(parents=True)
            subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def assert_finished_every_step(run: "RunDir", transport: str, max_steps: int = 4) -> None:
    """The run reached its last checkpoint with one trainer record per step, and the policies
    reached inference: on the filesystem transport the last one is written to weights/; on
    the collective one, checked across two processes' records, every batch the orchestrator
    generated came from a policy that inference says it swapped in (or the base model, step
    0), and none older than async_level allows (batch n from a policy >= n - async_level)."""
    assert run.latest_checkpoint() == max_steps
    records = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    trainer = [r for r in records if r["component"] == "trainer"]
    assert {r["step"] for r in trainer} == set(range(1, max_steps + 1))
    if transport == "filesystem":
        assert run.weights_stable(max_steps)
        return
    log = run.log_file("inference").read_text()
    served = {int(step) for step in re.findall(r"now serving step_(\d+) ", log)}
    async_level = tomllib.loads(run.config_file("orchestrator").read_text())["async_level"]
    batches = [r for r in records if r["component"] == "orchestrator" and "policy_step" in r]
    assert {r["step"] for r in batches} == set(range(max_steps)), batches
    for batch in batches:
        policy = batch["policy_step"]
        assert policy >= batch["step"] - async_level, (batch["step"], policy, async_level)
        assert policy == 0 or policy in served, (batch["step"], policy, sorted(served))


def assert_archive_holds_every_step(run: "RunDir", max_steps: int = 4) -> None:
    """samples/ holds one file per step (regenerated steps replaced, no temporary left), each
    with batch_size rows whose policy tokens' texts are the answers (every assistant turn) the
    environment saw."""
    from tokenizers import Tokenizer

    from rlcore.config.toml_io import load_toml
    from rlcore.contracts import samples_store

    orchestrator = load_toml(run.config_file("orchestrator"))
    tokenizer = Tokenizer.from_file(str(Path(orchestrator["model"]["name"]) / "tokenizer.json"))
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}
    batch_size = orchestrator["batch_size"]
    assert sorted(p.name for p in run.samples.iterdir()) == [
        f"step_{n}.parquet" for n in sorted(range(max_steps), key=str)
    ]
    for step in range(max_steps):
        rows = samples_store.read_step(samples_store.step_file(run.samples, step)).to_pylist()
        assert len(rows) == batch_size and {r["step"] for r in rows} == {step}
        for row in rows:
            assert row["error"] is None and row["kept"], row
            texts = zip(row["token_text"], row["token_mask"], strict=True)
            mine = "".join(t for t, policy in texts if policy and t not in special)
            turns = json.loads(row["completion"])
            answer = "".join(m["content"] for m in turns if m["role"] == "assistant")
            # vLLM leaves out a character cut off at max_tokens; the archive shows it as U+FFFD
            assert mine.rstrip("\ufffd") == answer, row


def avx2_said() -> str:
    """How rl's `Machine:` line names the ISA under rlcore.host.machine.AVX2_ENV: capped on a CPU
    above AVX2, plain `AVX2` on an AVX2-only one (no cap lowers anything there)."""
    if probe().hardware_isa == "avx2":
        return ", AVX2, "
    return "AVX2 (capped by ONEDNN_MAX_CPU_ISA"
