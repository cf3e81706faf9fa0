"""Building the plan `rl` runs: the GPUs this machine has, the plan (launcher/plan.py), the
trainer's memory estimate against them (launcher/memory.py), the estimate (launcher/forecast.py)
and the disk the run folder will need."""

import shutil
import subprocess
from dataclasses import replace

from launcher.forecast import forecast, rl_job
from launcher.memory import check_memory
from launcher.plan import Plan, make_plan
from launcher.rl_config import RLConfig, gpu_type
from launcher.slurm_config import inside_job
from launcher.speed import derive_speed
from rlcore.errors import ConfigError
from rlcore.forecast.model import disk, fullest
from rlcore.forecast.shape import shape_of
from rlcore.processes import children, ports
from rlcore.processes.health import server_url


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
    if not wanted:
        return
    names = query_gpus("name")
    wrong = sorted({n for n in names if wanted.lower() not in n.lower()})
    if wrong or not names:
        found = ", ".join(wrong) if wrong else "no GPU"
        message = f"--gpus {config.gpus} asks for {wanted} GPUs but this machine has {found}"
        if not dry_run:
            raise ConfigError(message + ": fix --gpus or run where they are")
        warnings.append(message + " (dry run: continuing)")


def settle_ports(config: RLConfig, dry_run: bool) -> str:
    """The inference servers' ports on this machine, reserved for the run from here on
    (rlcore.processes.ports; a dry run only looks): the given one if free (else a ConfigError naming
    it, its holder and the flag), or when unset DEFAULT_PORT if free, else the next free one (as
    many in a row as there are replicas). Returns the line the banner and a dry run show."""
    server, count = config.inference.server, config.inference.replicas
    if server.port is not None:
        ports.claim(server.host, server.port, count, "--inference.server.port", not dry_run)
        why = "inference.server.port as given"
    else:
        server.port = ports.choose(server.host, count, reserve_it=not dry_run)
        why = (
            f"inference.server.port unset: {ports.DEFAULT_PORT} is free"
            if server.port == ports.DEFAULT_PORT
            else f"inference.server.port unset: {ports.DEFAULT_PORT} is taken, this is the next "
            "free port"
        )
    urls = ", ".join(server_url(server.host, server.port + i) for i in range(count))
    held = "would be reserved" if dry_run else "reserved for this run"
    return f"Inference: {urls} ({why}; {held})"


def build_plan(config: RLConfig, dry_run: bool) -> Plan:
    """The plan for this machine, with the memory estimate (skipped when submitting a SLURM
    job: its GPUs are elsewhere). The inference ports are settled first (the base URL is
    derived from them); a job settles them on its nodes."""
    submitting = config.slurm is not None and not inside_job()
    chosen: dict[str, object] = {}
    if config.inference.server.port is None:
        chosen["inference.server.port"] = None
        if config.orchestrator.client.base_url is None:
            chosen["orchestrator.client.base_url"] = None
    note = "" if submitting else settle_ports(config, dry_run)
    plan = make_plan(config, detect_gpus(), dry_run, submitting)
    plan.ports_note, plan.machine_chosen = note, chosen
    if not submitting:
        check_gpu_type(plan.config, dry_run, plan.warnings)
    if not submitting:  # a job's machine decides them there, as it does the dtypes
        derive_speed(plan)
        plan.memory, warning = check_memory(plan.config, plan.gpu_map)
        if warning is not None:
            plan.warnings.append(warning)
        plan.forecast, plan.estimate = forecast(plan, dry_run)  # never raises nor writes
        plan.disk_need = disk_need(plan)
    return plan


def disk_need(plan: Plan) -> float | None:
    """Bytes the run folder may hold at its fullest, by the estimate's own disk figures
    (rlcore.forecast.model.disk): the checkpoints kept and one more being written, every live
    policy folder of the weight transport, the rollout archive (within its bound,
    `[orchestrator.samples] max_gib`: `Job.archive_bound`) and the logs. None when the model's
    shape is unknown (a hub model not yet fetched): no disk check then."""
    shape, _ = shape_of(plan.config.trainer.model.name)
    if shape is None:
        return None
    try:
        job = rl_job(plan, shape)
    except Exception:  # noqa: BLE001  (as the estimate: never stops a run, here no disk check)
        return None
    trainer = plan.config.trainer
    folders = trainer.weight_transfer.num_policy_folders(trainer.async_level)
    at_fullest = replace(fullest(job), policy_folders=folders)
    return sum(disk(at_fullest, shape, job.answer_mean).values())  # the archive within its bound
