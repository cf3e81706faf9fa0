"""Building the plan `rl` runs: the GPUs this machine has, the plan (launcher/plan.py) and the
trainer's memory estimate against them (launcher/memory.py)."""

import shutil
import subprocess

from launcher.forecast import forecast
from launcher.memory import check_memory
from launcher.plan import Plan, make_plan
from launcher.rl_config import RLConfig, gpu_type
from launcher.slurm_config import inside_job
from launcher.speed import derive_speed
from rlcore import children
from rlcore.errors import ConfigError


def query_gpus(field: str) -> list[str]:
    """One `nvidia-smi --query-gpu` field per visible GPU, without importing torch."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = children.run(
            ["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines()] if out.returncode == 0 else []


def detect_gpus() -> list[int]:
    """Physical GPU ids visible on this machine."""
    return [int(x) for x in query_gpus("index") if x.isdigit()]


def check_gpu_type(config: RLConfig, dry_run: bool, warnings: list[str]) -> None:
    """`--gpus NxTYPE`: every GPU found must be of TYPE (a dry run only warns)."""
    wanted = gpu_type(config.gpus) if config.gpus else None
    names = query_gpus("name") if wanted else []
    wrong = sorted({n for n in names if wanted.lower() not in n.lower()})
    if wanted and (wrong or not names):
        found = ", ".join(wrong) if wrong else "no GPU"
        message = f"--gpus {config.gpus} asks for {wanted} GPUs but this machine has {found}"
        if not dry_run:
            raise ConfigError(message + ": fix --gpus or run where they are")
        warnings.append(message + " (dry run: continuing)")


def build_plan(config: RLConfig, dry_run: bool) -> Plan:
    """The plan for this machine, with the memory estimate (skipped when submitting a SLURM
    job: its GPUs are elsewhere)."""
    submitting = config.slurm is not None and not inside_job()
    plan = make_plan(config, detect_gpus(), dry_run, submitting)
    if not submitting:
        check_gpu_type(plan.config, dry_run, plan.warnings)
    if not submitting:  # a job's machine decides them there, as it does the dtypes
        derive_speed(plan)
        plan.memory, warning = check_memory(plan.config, plan.gpu_map)
        if warning is not None:
            plan.warnings.append(warning)
        plan.forecast, plan.estimate = forecast(plan)  # never raises: one line when not made
    return plan
