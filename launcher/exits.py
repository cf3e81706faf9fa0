"""How a launcher names the end of a process it started: its exit code, the signal that killed
it, and whether the kernel killed it for memory (the cgroup's OOM-kill count, where Linux
keeps one). `rl` says it of a component, `rl sft` of its `sft`."""

import signal
from pathlib import Path

OOM_KNOBS = (
    "lower --trainer.data.micro-batch-tokens, turn on --trainer.model.activation-checkpointing, "
    "lower --seq-len, or give inference less KV cache (--inference.cpu.kvcache-space-gib)"
)
OOM_COUNTERS = (  # processes of this cgroup killed by any OOM killer: cgroup v2, then v1
    ("/sys/fs/cgroup/memory.events", "oom_kill"),
    ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill"),
)


def oom_kills() -> int | None:
    """How many processes of this cgroup the kernel has killed for memory, where Linux says."""
    for path, key in OOM_COUNTERS:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            field, _, value = line.partition(" ")
            if field == key and value.strip().isdigit():
                return int(value)
    return None


def exit_message(
    name: str, code: int, oom: tuple[int | None, int | None] = (None, None), knobs: str = OOM_KNOBS
) -> str:
    """Why a process ended the run, with its real exit code (or the signal that killed it);
    `oom` is the cgroup's OOM-kill count at the start and now, where known; `knobs`: what to
    lower when the kernel killed it for memory."""
    if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
        before, now = oom
        if before is None or now is None:
            return (
                f"{name} was killed (SIGKILL), most likely by the kernel for running out of "
                f"memory: {knobs}"
            )
        if now > before:
            return (
                f"{name} was killed (SIGKILL) by the kernel for running out of memory (this "
                f"cgroup's oom_kill count went from {before} to {now}): {knobs}"
            )
        return (
            f"{name} was killed (SIGKILL) by another process or a user, not for memory (this "
            f"cgroup's oom_kill count stayed at {now})"
        )
    if code < 0:
        return f"{name} was killed by {signal.Signals(-code).name}"
    if code == 0:
        return f"{name} stopped unexpectedly with code 0 while the run was going on"
    return f"{name} exited with code {code}"
