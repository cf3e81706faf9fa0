"""What `vs_trl.py` and its sweep (`vs_trl_sweep.py`) share: the job both sides do (`Job`), running
each side under a watch of its processes' memory and writes (`run_ours`, `run_trl`), and
summing up and printing the figures. Both scripts import it; it imports neither."""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psutil

from benchmarks.common import REPO, rl_argv
from benchmarks.launcher_overhead import QUICKSTART
from benchmarks.matmul_limit import linear_shapes
from rlcore.host.models import cache_dir, default_model_dir
from rlcore.reporting.metrics import read_records

STEPS, PROMPTS, GROUP, MAX_TOKENS, LR = 25, 4, 8, 16, 3e-5
SHARED_PACKAGES = ("torch", "transformers", "datasets", "accelerate")
TRL_SCRIPT = Path(__file__).with_name("trl_grpo_job.py")


class Watch:
    """Peak memory summed over a process tree (proportional set size: a page shared by n
    processes counts 1/n in each, so shared libraries count once), its peak per role (each
    direct child of the command with its descendants: inference, trainer, orchestrator), and
    bytes each role wrote. Bytes are sampled every `interval_s`, memory every `pss_every`
    samples: the kernel takes about 11 ms to sum one large process's pages, and sampling
    eight of them twice a second would slow the run it measures."""

    def __init__(self, proc: subprocess.Popen, interval_s: float = 0.5, pss_every: int = 4):
        self.proc, self.interval_s, self.pss_every = proc, interval_s, pss_every
        self.peak, self.role_peak, self.written, self.appeared = 0, {}, {}, {}
        self.trace: list[dict[str, float]] = []  # per memory sample: seconds, GiB per role
        self.started = time.perf_counter()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        root = psutil.Process(self.proc.pid)
        tick = 0
        while self.proc.poll() is None:
            try:
                roles = {"command": [root]}
                for child in root.children():
                    roles.setdefault(role_of(child), []).extend(
                        [child, *child.children(recursive=True)]
                    )
            except psutil.NoSuchProcess:
                break
            memory, tick = tick % self.pss_every == 0, tick + 1
            total, now = 0, time.perf_counter() - self.started
            sample = {"t": round(now, 1)}
            for role, procs in roles.items():
                self.appeared.setdefault(role, now)
                pss = sum(self.sample(role, p, memory) for p in procs)
                self.role_peak[role] = max(self.role_peak.get(role, 0), pss)
                sample[role] = round(pss / 2**30, 3)
                total += pss
            self.peak = max(self.peak, total)
            if memory:
                self.trace.append(sample)
            time.sleep(self.interval_s)

    def sample(self, role: str, p: psutil.Process, memory: bool) -> int:
        """Records the process's bytes written so far; its PSS now if `memory`, else 0."""
        try:
            self.written[p.pid] = (role, p.io_counters().write_bytes)
            return pss_bytes(p.pid) if memory else 0
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            return 0

    def result(self) -> dict[str, Any]:
        self.thread.join()
        by_role: dict[str, float] = {}
        for role, written in self.written.values():
            by_role[role] = by_role.get(role, 0.0) + written / 1e9
        return {
            "peak_gib": self.peak / 2**30,
            "peak_gib_by_role": {r: v / 2**30 for r, v in sorted(self.role_peak.items())},
            "written_gb": sum(by_role.values()),
            "written_gb_by_role": dict(sorted(by_role.items())),
            "appeared_s": self.appeared,
        }


def pss_bytes(pid: int) -> int:
    """The process's proportional set size, summed by the kernel (smaps_rollup): about 11 ms
    for a large process, hence sampled less often than bytes written (see Watch)."""
    with open(f"/proc/{pid}/smaps_rollup") as rollup:
        for line in rollup:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    return 0


def role_of(proc: psutil.Process) -> str:
    """`python -m trainer.main @ ...` -> trainer; anything else by its program name."""
    argv = proc.cmdline()
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1].split(".")[0]
    return Path(argv[0]).name if argv else "?"


def timed(argv: list[str], log: Path, cwd: Path = REPO) -> dict[str, Any]:
    os.sync()
    disk_before = disk_written_bytes()
    started, started_at = time.perf_counter(), time.time()
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        watch = Watch(proc)
        code = proc.wait()
    wall_s = time.perf_counter() - started
    trace = log.with_suffix(".memory.jsonl")  # PSS per role over time, to see what peaks together
    trace.write_text("".join(json.dumps(sample) + "\n" for sample in watch.trace))
    os.sync()  # what the run left in the page cache reaches the disk and is counted
    written = (disk_written_bytes() - disk_before) / 1e9
    figures = {"exit_code": code, "wall_s": wall_s, "started_at": started_at}
    return figures | watch.result() | {"disk_written_gb": written}


def disk_written_bytes() -> int:
    """Bytes written to this machine's disks so far (/proc/diskstats; whole disks, not
    partitions, RAM or loop devices): counts a run's writes even after its processes exit,
    where per-process counters stop at their last sample."""
    disks = {
        p.name
        for p in Path("/sys/block").iterdir()
        if not p.name.startswith(("loop", "ram", "zram"))
    }
    total = 0
    for line in Path("/proc/diskstats").read_text().splitlines():
        fields = line.split()
        if fields[2] in disks:
            total += int(fields[9]) * 512  # sectors written
    return total


def trl_python(trl_version: str | None) -> Path:
    """The interpreter of the TRL environment, built once with uv."""
    env = cache_dir() / "trl-env"
    python = env / "bin" / "python"
    if not python.exists():
        uv = shutil.which("uv") or sys.exit("vs_trl: needs uv on PATH (pip install uv)")
        subprocess.run([uv, "venv", "--python", sys.executable, str(env)], check=True)
        pins = [f"{name}=={version(name)}" for name in SHARED_PACKAGES]
        trl = f"trl=={trl_version}" if trl_version else "trl"
        cmd = [uv, "pip", "install", "--python", str(python), trl, *pins, "psutil"]
        subprocess.run(cmd, check=True)
    return python


@dataclass(frozen=True)
class Job:
    """One job both sides do: `prompts` x `group` rollouts per step, `max_tokens` per answer
    (per turn in a multi-turn environment), `steps` steps, lr 3e-5, on environment `env`."""

    name: str = "quick start"
    prompts: int = PROMPTS
    group: int = GROUP
    max_tokens: int = MAX_TOKENS
    steps: int = STEPS
    env: str = "rl-add-digits"

    @property
    def rollouts(self) -> int:
        return self.prompts * self.group

    @property
    def seq_len(self) -> int:
        """Room for the prompt (under 64 tokens here) and the answer, at least the quick
        start's 256; a multi-turn rollout's turns add up, so it gets twice that."""
        need = (64 + self.max_tokens) * (2 if self.env != "rl-add-digits" else 1)
        return max(256, 1 << (need - 1).bit_length())

    def our_flags(self, work: Path) -> list[str]:
        """What the quick start's files get on top to do this job (nothing for the quick
        start itself)."""
        flags = [] if self.steps == STEPS else ["--max-steps", str(self.steps)]
        if self.rollouts != PROMPTS * GROUP:
            flags += [
                "--orchestrator.batch-size",
                str(self.rollouts),
                "--orchestrator.client.max-concurrent",
                str(self.rollouts),
            ]
        if self.max_tokens != MAX_TOKENS:
            flags += ["--orchestrator.sampling.max-tokens", str(self.max_tokens)]
        if self.seq_len != 256:
            flags += [
                "--seq-len",
                str(self.seq_len),
                "--inference.model.max-model-len",
                str(self.seq_len),
            ]
        # The quick start's KV cache (0.125 GiB) holds its 32 rollouts of a prompt (under 64
        # tokens) and 16 answer tokens; a larger job gets 1.5x what its rollouts can hold.
        turns = 2 if self.env != "rl-add-digits" else 1
        tokens = self.rollouts * (64 + self.max_tokens) * turns
        if tokens > PROMPTS * GROUP * (64 + MAX_TOKENS):
            kv_gib = 1.5 * tokens * KV_BYTES_PER_TOKEN / 2**30
            flags += ["--inference.cpu.kvcache-space-gib", f"{kv_gib:.2f}"]
        if self.env != "rl-add-digits":
            layer = work / "env.toml"
            layer.write_text(f'[[env]]\nid = "{self.env}"\n')
            flags += ["--orchestrator", "@", str(layer)]
        return flags


KV_BYTES_PER_TOKEN = 46_080  # SmolLM2-135M in fp32: 30 layers x 2 x 3 heads x 64 x 4 bytes


def write_dataset(path: Path, seed: int) -> None:
    """The quick start's training prompts, in its order of examples (chat messages)."""
    from rl_add_digits import load_environment

    rows = load_environment(seed=seed).dataset.to_list()
    with path.open("w") as out:
        for row in rows:
            out.write(json.dumps({"prompt": row["prompt"], "answer": row["answer"]}) + "\n")


def run_trl(seed: int, work: Path, trl_version: str | None, job: Job = Job()) -> dict:
    data, result = work / "trl_data.jsonl", work / "trl_result.json"
    write_dataset(data, seed)
    argv = [
        str(trl_python(trl_version)),
        str(TRL_SCRIPT),
        "--model",
        str(default_model_dir()),
        "--data",
        str(data),
        "--out",
        str(work / "trl_out"),
        "--result",
        str(result),
        "--seed",
        str(seed),
        "--steps",
        str(job.steps),
        "--prompts",
        str(job.prompts),
        "--group",
        str(job.group),
        "--max-tokens",
        str(job.max_tokens),
        "--lr",
        str(LR),
    ]
    figures = timed(argv, work / "trl.log")
    return figures | (json.loads(result.read_text()) if result.exists() else {})


def run_ours(seed: int, work: Path, extra: list[str], job: Job = Job()) -> dict:
    out = work / "ours"
    argv = rl_argv(*QUICKSTART, "--seed", str(seed), "--output-dir", str(out), "--clean")
    figures = timed(argv + job.our_flags(work) + extra, work / "ours.log")
    metrics = out / "metrics.jsonl"
    records = read_records(metrics)[0] if metrics.exists() else []
    rewards = [r["reward"] for r in records if r["component"] == "orchestrator" and "reward" in r]
    # A step is the whole cycle, as TRL's step_time (generate + train): from one update's end
    # to the next one's, which also counts waiting for data and publishing.
    ends = [r["time"] for r in records if r["component"] == "trainer"]
    steps = [b - a for a, b in zip(ends, ends[1:], strict=False)]
    profile = breakdown(out, records, figures)
    return figures | {"rewards": rewards, "step_s": steps[4:] or steps, "profile": profile}


TRAINER_PARTS = (
    "data_wait_s",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "publish_s",
    "transfer_send_s",
    "ckpt_s",
    "step_time_s",
)
ORCHESTRATOR_PARTS = ("time/generate_s", "time/wait_weights_s", "time/step_s")


def breakdown(out: Path, records: list[dict], figures: dict) -> dict[str, dict[str, float]]:
    """Where our run's time went: the startup (seconds from the command) and the median of
    each part of a steady step (steps 5 on), per process."""
    trainer = [r for r in records if r["component"] == "trainer"]
    orchestrator = [r for r in records if r["component"] == "orchestrator"]
    appeared, started_at = figures["appeared_s"], figures["started_at"]
    startup = {f"{role} started": s for role, s in appeared.items() if role != "command"}
    inference = log_seconds(out / "logs" / "inference.log", r"ready: serving .* \(([\d.]+) s\)")
    setup = log_seconds(out / "logs" / "trainer.log", r"set up in ([\d.]+) s")
    if inference is not None and "inference" in appeared:
        startup["inference ready"] = appeared["inference"] + inference
    if setup is not None and "trainer" in appeared:
        startup["trainer set up"] = appeared["trainer"] + setup
    if orchestrator:
        startup["first batch"] = orchestrator[0]["time"] - started_at
    if trainer:
        startup["first update"] = trainer[0]["time"] - started_at
    steady = {
        "trainer": (trainer[5:], TRAINER_PARTS),
        "orchestrator": (orchestrator[5:], ORCHESTRATOR_PARTS),
    }
    step = {
        f"{name} {key}": statistics.median(r.get(key, 0.0) for r in rows)
        for name, (rows, keys) in steady.items()
        if rows
        for key in keys
    }
    flops = [linear_flops(r) for r in trainer[5:] if r.get("forward_s")]
    rates = {"trainer linear GFLOP/s": statistics.median(flops) / 1e9} if flops else {}
    return {"startup_s": startup, "steady_step_s": step, "rates": rates}


def linear_flops(record: dict) -> float:
    """FLOP/s of a trainer step's forward and backward on the linear layers (6 x their
    parameters per token: the FLOPs `benchmarks/matmul_limit.py` times)."""
    seconds = record["forward_s"] + record["backward_s"]
    return 6 * linear_params() * record["num_tokens"] / seconds


@cache
def linear_params() -> int:
    config = json.loads((default_model_dir() / "config.json").read_text())
    return sum(n_in * n_out * count for _, n_in, n_out, count in linear_shapes(config))


def log_seconds(log: Path, pattern: str) -> float | None:
    found = re.findall(pattern, log.read_text()) if log.exists() else []
    return float(found[-1]) if found else None


def summary(side: dict) -> dict:
    rewards, steps = side.get("rewards", []), side.get("step_s", [])
    return {
        "wall_s": side["wall_s"],
        "steady_step_s": sorted(steps)[len(steps) // 2] if steps else float("nan"),
        "peak_gib": side["peak_gib"],
        "written_gb": side["written_gb"],
        "disk_written_gb": side["disk_written_gb"],
        "last5_reward": sum(rewards[-5:]) / len(rewards[-5:]) if rewards else float("nan"),
        "exit_code": side["exit_code"],
    } | {
        key: side[key]
        for key in ("profile", "peak_gib_by_role", "written_gb_by_role")
        if key in side
    }


def print_profile(ours: dict) -> None:
    for section, figures in ours.get("profile", {}).items():
        print(f"        ours, {section.replace('_', ' ')}:")
        for key, value in figures.items():
            print(f"          {key:<34} {value:>8.2f}")
    for key in ("peak_gib_by_role", "written_gb_by_role"):
        parts = ", ".join(f"{role} {value:.2f}" for role, value in ours.get(key, {}).items())
        print(f"        {key:<16} ours: {parts}")


def print_row(seed: int, ours: dict, trl: dict) -> None:
    print(f"\nseed {seed}: {'measure':<16} {'ours':>10} {'TRL':>10} {'ratio':>8}")
    keys = ("exit_code", "wall_s", "steady_step_s", "peak_gib", "disk_written_gb", "last5_reward")
    for key in keys:
        a, b = ours.get(key, float("nan")), trl.get(key, float("nan"))
        ratio = a / b if b else float("nan")
        print(f"        {key:<16} {a:>10.2f} {b:>10.2f} {ratio:>8.2f}")
    print_profile(ours)
