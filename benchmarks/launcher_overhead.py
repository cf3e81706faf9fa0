"""Launcher overhead: `rl --help`, `rl --dry-run`, and time from starting `rl` to the first
orchestrator step, split into vLLM start (until /health), model load (as vLLM reports it) and
the rest. Usage: python benchmarks/launcher_overhead.py [--skip-run] [rl flags for the run...]
"""

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import REPO, print_table, rl_argv, save, time_command  # noqa: E402

QUICKSTART = [
    "--trainer",
    "@",
    "configs/quickstart/train.toml",
    "--orchestrator",
    "@",
    "configs/quickstart/orch.toml",
    "--inference",
    "@",
    "configs/quickstart/infer.toml",
]
MODEL_LOAD = re.compile(
    r"(?:Model loading took|Loading weights took) ([\d.]+) ?(?:GiB and ([\d.]+) seconds|seconds)"
)


def first_step(extra: list[str]) -> dict:
    """Start a run and time its phases until the first `Step` line; then stop it."""
    out = Path(tempfile.mkdtemp(prefix="rl-overhead-"))
    argv = rl_argv(*QUICKSTART, "--output-dir", str(out), "--max-steps", "2", *extra)
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, text=True, bufsize=1)
    marks: dict[str, float] = {}
    for line in proc.stdout:
        now = time.perf_counter() - started
        if "waiting for inference" in line:
            marks.setdefault("inference_started", now)
        if "inference is healthy" in line:
            marks.setdefault("inference_healthy", now)
        if "Step 0 |" in line:
            marks["first_step"] = now
            break
    proc.terminate()
    proc.wait(timeout=120)
    log = (out / "logs" / "inference.log").read_text(errors="replace")
    loads = [float(m.group(2) or m.group(1)) for m in MODEL_LOAD.finditer(log)]
    marks["model_load"] = loads[0] if loads else float("nan")
    return marks


def main() -> None:
    skip_run = "--skip-run" in sys.argv
    extra = [a for a in sys.argv[1:] if a != "--skip-run"]
    help_s = time_command(rl_argv("--help"))
    dry_s = time_command(rl_argv(*QUICKSTART, "--dry-run"))
    rows = [
        ("rl --help", f"{help_s:.3f} s", "limit 1 s"),
        ("rl --dry-run (quickstart)", f"{dry_s:.3f} s", "limit 1 s"),
    ]
    data = {"help_s": help_s, "dry_run_s": dry_s}
    if not skip_run:
        marks = first_step(extra)
        data.update(marks)
        vllm_start = marks["inference_healthy"] - marks["inference_started"]
        rest = marks["first_step"] - vllm_start
        rows += [
            ("start -> first step", f"{marks['first_step']:.1f} s", "sum of the three below"),
            (
                "  vLLM start (to /health)",
                f"{vllm_start:.1f} s",
                "earlier measurement: ~35 s eager on CPU",
            ),
            ("    of which model load", f"{marks['model_load']:.1f} s", "reported by vLLM"),
            ("  rest (checks, env, 1st batch)", f"{rest:.1f} s", "generation of batch 0"),
        ]
    print_table("Launcher overhead", rows)
    save("launcher_overhead", data)


if __name__ == "__main__":
    main()
