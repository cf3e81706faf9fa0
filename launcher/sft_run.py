"""`rl sft @ sft.toml [--KEY VALUE ...] [--max-restarts N] [--clean]`: supervised fine-tuning
as a run. The config is checked before anything is written (exit 2 naming the key); the run
folder is claimed and locked for the run's life (never beside another `rl`, nor a trainer or
orchestrator started alone); the `sft` process's output goes to `logs/sft.log` and here;
Ctrl-C stops it and exits 130; a failure resumes from the latest checkpoint up to
`--max-restarts` times. `sft @ sft.toml` runs the same process without any of this.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from launcher.supervisor import Stop, ignore_signals, install_signal_handlers
from rlcore import procs
from rlcore.entry import exit_with, parse_config
from rlcore.errors import ConfigError
from rlcore.rundir import RunDir, record_state
from rlcore.runguard import RL_SFT, check_run, hold
from rlcore.runlock import LAUNCHER_ENV
from rlcore.toml_io import write_config
from trainer.sft.config import SFTConfig

USAGE = "rl sft @ sft.toml [--KEY.PATH VALUE ...] [--max-restarts N] [--clean]"
EXTRA_HELP = """\
  --max-restarts N      after a failure, resume from the latest checkpoint up to N times
  --clean               start over: delete what the earlier run in output_dir created (only in
                        a folder rl marked as a run, never while another process holds it)"""
SIGNAL_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}


def main(argv: list[str]) -> int:
    argv, restarts = take_value(argv, "--max-restarts")
    clean = "--clean" in argv
    argv = [a for a in argv if a != "--clean"]
    max_restarts = parse_restarts(restarts)
    config, _ = parse_config(SFTConfig, "rl sft", argv, usage=USAGE, extra_help=EXTRA_HELP)
    check_data(argv)
    run = RunDir(config.output_dir)
    try:
        step = prepare(run, config, clean)
    except ConfigError as err:
        exit_with(str(err), "rl sft")
    failures = 0
    while True:
        code = run_attempt(run, config, step)
        if code in (0, *SIGNAL_EXIT.values()) or failures >= max_restarts:
            return code
        failures += 1
        step = run.latest_checkpoint()
        where = f"checkpoint step {step}" if step else "the start"
        print(f"rl sft: sft exited with {code}; restarting from {where} "
              f"(restart {failures} of {max_restarts})", flush=True)  # fmt: skip


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


def check_data(argv: list[str]) -> None:
    """`sft --check-data`: the data read and tokenized as `sft` will, so a bad file or row
    exits 2 (its message already printed) before the run folder is touched."""
    command = [sys.executable, "-m", "trainer.sft.main", *argv, "--check-data"]
    code = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
    if code:
        sys.exit(code)


def prepare(run: RunDir, config: SFTConfig, clean: bool) -> int | None:
    """Clear (with --clean), claim and lock the folder; the step to resume from."""
    from launcher.preflight import clean_run
    from rlcore.ownership import read_run_id

    check_run(run.root, RL_SFT)  # an sft run, or new or empty; nobody else in it; no links
    if read_run_id(run.root) is not None:
        hold(run.root, RL_SFT)
    if clean and run.root.exists():
        if config.ckpt.resume_step is not None:
            raise ConfigError("--clean deletes the checkpoints --ckpt.resume-step would load")
        clean_run(run.root)
    return run.prepare_attempt(config.ckpt.resume_step, ("weights",), RL_SFT)


def run_attempt(run: RunDir, config: SFTConfig, step: int | None) -> int:
    """Start `sft` on the resolved config (resuming from `step`), mirror its output into
    logs/sft.log, wait; its exit code (128 + n after a signal). run.json records this launcher
    and the `sft` process with their identities (rlcore.procs), then how the attempt ended."""
    config.ckpt.resume_step = step
    config_file = run.config_file("sft")
    write_config(config, config_file)
    run.logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, LAUNCHER_ENV: str(os.getpid())}
    install_signal_handlers()
    with open(run.log_file("sft"), "a") as log:
        child = subprocess.Popen(
            sft_command(config_file), env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        processes = {"launcher_pid": os.getpid(), "pids": {"sft": child.pid},
                     procs.IDENTITIES: {procs.LAUNCHER: procs.identity(),
                                        "sft": procs.identity(child.pid)}}  # fmt: skip
        record_state(run, "running", **processes)  # for `rl status` and `rl stop`
        try:
            for line in child.stdout:
                sys.stdout.write(line)
                log.write(line)
                log.flush()
            code = child.wait()
        except Stop as stop:
            ignore_signals()
            stop_child(child, signal.Signals(stop.signum).name)
            record_state(run, "stopped", signal=stop.signum, **processes)
            return SIGNAL_EXIT[stop.signum]
    record_state(run, "finished" if code == 0 else "failed", exit_code=code, **processes)
    return code


def sft_command(config_file: Path) -> list[str]:
    return [sys.executable, "-m", "trainer.sft.main", "@", str(config_file)]


def stop_child(child: subprocess.Popen, why: str) -> None:
    """SIGTERM, then SIGKILL after 30 s; the last finished checkpoint stays."""
    print(f"rl sft: stopping ({why})", file=sys.stderr, flush=True)
    child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
