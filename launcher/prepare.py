"""Building the plan `rl` runs: the GPUs this machine has, the plan (launcher/plan.py) and the
trainer's memory estimate against them (launcher/memory.py)."""

import shutil
import subprocess

from launcher.memory import check_memory
from launcher.plan import Plan, make_plan
from launcher.rl_config import RLConfig
from launcher.slurm_config import inside_job


def detect_gpus() -> list[int]:
    """Physical GPU ids visible on this machine, without importing torch."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return (
        [int(x) for x in out.stdout.split() if x.strip().isdigit()] if out.returncode == 0 else []
    )


def build_plan(config: RLConfig, dry_run: bool) -> Plan:
    """The plan for this machine, with the memory estimate (skipped when submitting a SLURM
    job: its GPUs are elsewhere)."""
    submitting = config.slurm is not None and not inside_job()
    plan = make_plan(config, detect_gpus(), dry_run, submitting)
    if not submitting:
        plan.memory, warning = check_memory(plan.config, plan.gpu_map)
        if warning is not None:
            plan.warnings.append(warning)
    return plan
