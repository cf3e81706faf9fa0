"""`rl sft @ sft.toml [--KEY VALUE ...] [--max-restarts N] [--clean]`: supervised fine-tuning as a
run. The config is checked before anything is written (exit 2 naming the key), the data
tokenized (`sft --check-data`: the estimate takes its tokens) and the free space compared with
the run folder at its fullest (exit 2 naming `--ckpt.keep`); the run folder is claimed and
locked for the run's life (never beside another `rl`, nor a trainer or orchestrator started
alone); the `sft` process's output goes to `logs/sft.log` and here; Ctrl-C stops it and exits
130; a failure resumes from the latest checkpoint up to `--max-restarts` times, by `rl`'s
restart policy (`with_restarts` in launcher/launch.py). `sft @ sft.toml` runs the same process
without any of this.
"""

import math
import os
import subprocess
import sys
from pathlib import Path

from launcher.eta import RunClock
from launcher.exits import exit_message, oom_kills
from launcher.forecast import sft_forecast
from launcher.launch import with_restarts
from launcher.preflight import check_room, clean_run
from rlcore.config.entry import exit_with, parse_config
from rlcore.config.literal_secrets import write_for_child
from rlcore.errors import ConfigError
from rlcore.files.disk_full import DISK_FULL_EXIT_CODE, DiskFullError, stopped_text
from rlcore.files.readback import LOG_TAIL, Damaged, read_from
from rlcore.forecast.model import Forecast
from rlcore.forecast.report import keep_measurement, tokens_said
from rlcore.processes import children, procs
from rlcore.processes.poll import (
    STOP_EXIT_CODES,
    Stop,
    ignore_stop_signals,
    install_stop_handlers,
    wait_until,
)
from rlcore.reporting.metrics import read_records
from rlcore.runs.rundir import RunDir, record_state
from rlcore.runs.runguard import LAUNCHER_ENV, RL_SFT, check_run, hold
from trainer.sft.config import SFTConfig

USAGE = "rl sft @ sft.toml [--KEY.PATH VALUE ...] [--max-restarts N] [--clean]"
EXTRA_HELP = """\
  --max-restarts N      after a failure, resume from the latest checkpoint up to N times
  --clean               start over: delete what the earlier run in output_dir created (only in
                        a folder rl marked as a run, never while another process holds it)"""
STOP_GRACE_S = 30.0
"""Seconds between SIGTERM and SIGKILL when stopping `sft` (the last finished checkpoint
stays)."""
OUTPUT_POLL_S = 0.2
OOM_KNOBS = (
    "lower --data.micro-batch-tokens, turn on --model.activation-checkpointing, or lower --seq-len"
)


def main(argv: list[str]) -> int:
    argv, restarts = take_value(argv, "--max-restarts")
    clean = "--clean" in argv
    argv = [a for a in argv if a != "--clean"]
    max_restarts = parse_restarts(restarts)
    config, _ = parse_config(SFTConfig, "rl sft", argv, usage=USAGE, extra_help=EXTRA_HELP)
    tokens = check_data(argv)
    forecast, lines = sft_forecast(config, tokens)  # never raises: one line when not made
    print("\n".join(lines), flush=True)
    run = RunDir(config.output_dir)
    try:
        check_disk(run.root, forecast)
        step = prepare(run, config, clean)
    except ConfigError as err:
        exit_with(str(err), "rl sft")
    keep_measurement(forecast)  # every check passed: the run starts

    def attempt(step: int | None) -> tuple[int, bool]:
        code = run_attempt(run, config, step, RunClock(forecast, config.max_steps, ["sft"]))
        if code == DISK_FULL_EXIT_CODE:
            print(
                f"rl sft: error: {stopped_text('sft', run.root, run.log_file('sft'))}",
                file=sys.stderr,
            )
        # rl sft's own stop, or an `sft` a signal stopped through its handler (`kill PID`)
        return code, code in STOP_EXIT_CODES.values()

    return exit_code(with_restarts(attempt, step, run, max_restarts, "rl sft"))


def exit_code(code: int) -> int:
    """What `rl sft` exits with after an attempt that ended with `code`: 1 for an `sft` a
    signal killed, as `rl` does for a component."""
    return code if code >= 0 else 1


def take_value(argv: list[str], flag: str) -> tuple[list[str], str | None]:
    """argv without `flag VALUE` (or `flag=VALUE`), and the value (None when absent)."""
    for i, token in enumerate(argv):
        if token == flag:
            if i + 1 == len(argv):
                exit_with(f"{flag} needs a value, e.g. {flag} 2", "rl sft")
            return argv[:i] + argv[i + 2 :], argv[i + 1]
        if token.startswith(flag + "="):
            return argv[:i] + argv[i + 1 :], token.partition("=")[2]
    return argv, None


def parse_restarts(value: str | None) -> int:
    if value is None:
        return 0
    if not value.isdigit() or int(value) > 100:
        exit_with(f"--max-restarts {value!r}: give a whole number from 0 to 100", "rl sft")
    return int(value)


def check_data(argv: list[str]) -> float | None:
    """`sft --check-data`: the data read and tokenized as `sft` will, so a bad file or row
    exits 2 (its message already printed) before the run folder is touched. Returns the mean
    tokens per example it said (the estimate's), or None."""
    command = [sys.executable, "-m", "trainer.sft.main", *argv, "--check-data"]
    done = children.run(command, stdout=subprocess.PIPE)
    if done.returncode:
        sys.exit(done.returncode)
    return tokens_said(done.stdout[-4096:].decode("utf-8", errors="replace"))


def check_disk(root: Path, forecast: Forecast | None) -> None:
    """The run folder at its fullest (`Forecast.disk_fullest`) against the free space where it
    is made, as `rl` checks its own; no check without an estimate."""
    need = forecast.disk_fullest if forecast is not None else None
    check_room(root, need, "checkpoints and the final weights")


def prepare(run: RunDir, config: SFTConfig, clean: bool) -> int | None:
    """Clear (with --clean), claim and lock the folder; the step to resume from."""
    from rlcore.runs.ownership import read_run_id

    check_run(run.root, RL_SFT)  # an sft run, or new or empty; nobody else in it; no links
    if read_run_id(run.root) is not None:
        hold(run.root, RL_SFT)
    if clean and run.root.exists():
        if config.ckpt.resume_step is not None:
            raise ConfigError("--clean deletes the checkpoints --ckpt.resume-step would load")
        clean_run(run.root)
    return run.prepare_attempt(config.ckpt.resume_step, ("weights",), RL_SFT)


def run_attempt(run: RunDir, config: SFTConfig, step: int | None, clock: RunClock) -> int:
    """Start `sft` on the resolved config (resuming from `step`; rlcore.processes.children: its own
    session, gone when this launcher dies), show its output (logs/sft.log) here, wait; its
    exit code (-n when signal n ended it, said as `rl` says it: launcher.exits), or 128 + n
    when this launcher was stopped by signal n. run.json records this launcher and the `sft`
    process with their identities (rlcore.processes.procs), then how the attempt ended."""
    config.ckpt.resume_step = step
    config_file = run.config_file("sft")
    secret_env = write_for_child(config, config_file)
    install_stop_handlers()
    log = run.log_file("sft")
    env = {**secret_env, LAUNCHER_ENV: str(os.getpid())}
    shown = Output(log)
    oom_before = oom_kills()
    child = children.start("sft", sft_command(config_file), log, env)
    identities = {procs.LAUNCHER: procs.identity(), "sft": child.identity}
    processes = {
        "launcher_pid": os.getpid(),
        "pids": {"sft": child.pid},
        procs.IDENTITIES: identities,
    }
    record_state(run, "running", **processes, **clock.state())  # for `rl status`, `rl stop`

    metrics = [run.metrics.stat().st_size if run.metrics.exists() else 0]

    def ended() -> bool:
        shown.copy()
        records, metrics[0] = read_records(run.metrics, metrics[0])
        for record in records:
            clock.record(record)  # the steps' pace, for run.json's measured totals
        clock.sample_memory({"trainer": child.pid})
        return child.proc.poll() is not None

    try:
        wait_until(ended, math.inf, OUTPUT_POLL_S, "sft to end")
    except Stop as stop:
        ignore_stop_signals("rl sft")
        print(f"rl sft: stopping ({stop})", file=sys.stderr, flush=True)
        children.stop([child], STOP_GRACE_S)
        shown.copy(final=True)
        record_state(run, "stopped", signal=stop.signum, **processes)
        return stop.exit_code
    shown.copy(final=True)
    code = child.proc.returncode
    if code not in (0, DISK_FULL_EXIT_CODE):  # a full disk: main says which file
        message = exit_message("sft", code, (oom_before, oom_kills()), OOM_KNOBS)
        print(f"rl sft: error: {message}", file=sys.stderr, flush=True)
    if code == 0:
        clock.finish(run.root)
        if (against := clock.against_estimate()) is not None:
            print(f"rl sft: {against}", flush=True)
    try:
        state = "finished" if code == 0 else "failed"
        record_state(run, state, exit_code=code, **processes, **clock.state())
    except DiskFullError:
        if code != DISK_FULL_EXIT_CODE:
            raise  # rl sft's own write met the full disk first (rlcore.config.entry says so)
        # sft's did, which main says; run.json keeps "running" (rl status finds sft gone)
    return code


class Output:
    """Shows here what the next child started on `log` writes there (rlcore.processes.children's
    header line left out)."""

    def __init__(self, log: Path):
        self.log = log
        self.offset = log.stat().st_size if log.exists() else 0
        self.header = True

    def copy(self, final: bool = False) -> None:
        """Write out what is new: whole lines (the rest waits for its newline), everything
        when `final`; always None, so that it can run inside a wait's predicate. The log is
        read back bounded (rlcore.files.readback), at most LOG_TAIL at a time."""
        while self.copy_some(final):
            pass

    def copy_some(self, final: bool) -> bool:
        """Copy at most LOG_TAIL bytes (a line longer than that in pieces); whether there may
        be more."""
        try:
            new = read_from(self.log, self.offset, LOG_TAIL)
        except (FileNotFoundError, Damaged):
            return False
        full = len(new) == LOG_TAIL.max_bytes
        if self.header:  # written before the child starts: always there by now
            start = new.find(b"\n", new.find(children.HEADER.encode())) + 1
            new, self.offset, self.header = new[start:], self.offset + start, False
        end = len(new) if final else new.rfind(b"\n") + 1 or (len(new) if full else 0)
        if end:
            sys.stdout.write(new[:end].decode(errors="replace"))
            sys.stdout.flush()
            self.offset += end
        return full


def sft_command(config_file: Path) -> list[str]:
    return [sys.executable, "-m", "trainer.sft.main", "@", str(config_file)]
